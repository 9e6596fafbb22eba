"""The dataset catalog, validation holdouts, and image folders decoded per item."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import tfam.data
from tfam.data import (
    BatchAugment,
    ImageFolder,
    get_dataset,
    holdout_split,
    list_datasets,
    load_dataset,
    register_dataset,
    resolve_data,
)

SRC = Path(tfam.data.__file__).parent


def write_folder(root: Path, sizes=((8, 8),), modes=("L",), per_class: int = 5) -> Path:
    rng = np.random.default_rng(1)
    for c, name in enumerate(("ant", "bee")):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            h, w = sizes[i % len(sizes)]
            mode = modes[i % len(modes)]
            shape = (h, w, 3) if mode == "RGB" else (h, w)
            a = rng.integers(0, 256, shape).astype(np.uint8)
            Image.fromarray(a, mode=mode).save(root / name / f"{c}{i}.png")
    (root / "ant" / "notes.txt").write_text("not an image: skipped by extension")
    return root


def test_catalog_lists_and_resolves() -> None:
    assert list_datasets()[:2] == ["digits", "fashion-mnist"]
    entry = get_dataset("Fashion_MNIST")
    assert entry.name == "fashion-mnist" and entry.task == "image-classification"
    assert entry.recipe.preset == "vit_fashion_mnist" and entry.augment == (1, True)
    assert get_dataset("digits").recipe.threads == 1
    with pytest.raises(ValueError, match="unknown dataset 'cifar10'; valid names: digits"):
        get_dataset("cifar10")
    with pytest.raises(ValueError, match="registered twice"):
        register_dataset(get_dataset("digits"))
    with pytest.raises(ValueError, match="or an image folder"):
        resolve_data("no/such/dir")


def test_default_augment_comes_from_the_entry() -> None:
    aug = tfam.data.default_augment(get_dataset("fashion-mnist"), padding=2)
    assert (aug.padding, aug.flip) == (2, True)
    with pytest.raises(ValueError, match=r"padding=5 is invalid for 8x8 images.*0\.\.4"):
        BatchAugment(padding=5).check_image_size(8)
    BatchAugment(padding=4).check_image_size((8, 12))


def test_augment_imports_no_dataset_module() -> None:
    """augment.py <-> images.py was an import cycle: augment now knows no dataset."""
    tree = ast.parse((SRC / "vision" / "augment.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any(m.startswith("tfam") for m in imported), imported


def test_digits_validation_holdout() -> None:
    pytest.importorskip("sklearn")
    train, fit, val = (load_dataset("digits", s) for s in ("train", "fit", "val"))
    assert len(fit) + len(val) == len(train) == 1437
    assert len(val) == pytest.approx(0.1 * len(train), abs=10)
    # fit and val partition train: every training image is in exactly one of them.
    rows = lambda ds: sorted(map(bytes, ds.images.reshape(len(ds), -1).numpy()))  # noqa: E731
    assert sorted(rows(fit) + rows(val)) == rows(train)
    # Stratified: every class is in val, in proportion.
    counts = val.class_counts()
    assert bool((counts > 0).all()) and int(counts.max() - counts.min()) <= 2
    # Fixed: the same split every time, normalised with train's statistics.
    again = load_dataset("digits", "val")
    assert torch.equal(again.images, val.images)
    assert torch.equal(fit.mean, train.mean) and torch.equal(val.std, train.std)


def test_holdout_split_rules() -> None:
    labels = torch.tensor([0] * 10 + [1] * 3 + [2])
    keep, held = holdout_split(labels, 0.2, seed=0)
    assert sorted(keep.tolist() + held.tolist()) == list(range(14))
    assert labels[held].tolist().count(0) == 2 and labels[held].tolist().count(1) == 1
    assert 13 in keep.tolist()  # a class of one stays in training
    assert torch.equal(held, holdout_split(labels, 0.2, seed=0)[1])
    assert not torch.equal(held, holdout_split(labels, 0.2, seed=1)[1])
    with pytest.raises(ValueError, match=r"fraction=1.5 is invalid"):
        holdout_split(labels, 1.5, 0)


def test_image_folder_items_and_facts(tmp_path: Path) -> None:
    root = write_folder(tmp_path / "bugs")
    ds = ImageFolder(root, "train")
    assert ds.classes == ("ant", "bee") and len(ds) == 10
    assert (ds.image_size, ds.in_channels, ds.pixel_scale) == (8, 1, 255.0)
    assert ds.name == str(root.resolve())
    x, y = ds[7]
    assert x.shape == (1, 8, 8) and x.dtype == torch.float32 and y == 1
    raw = np.asarray(Image.open(ds.file(7)), dtype=np.float32) / 255
    assert torch.allclose(x[0], (torch.from_numpy(raw) - ds.mean) / ds.std, atol=1e-6)
    # Statistics of the train split, exact for a small folder.
    pixels = torch.stack([ds.stored(i) for i in range(len(ds))]).double() / 255
    assert ds.mean.item() == pytest.approx(pixels.mean().item(), abs=1e-6)
    # A fixed, stratified train/validation split.
    fit, val = ImageFolder(root, "fit"), ImageFolder(root, "val")
    assert len(fit) + len(val) == 10 and val.class_counts().tolist() == [1, 1]
    assert {str(val.file(i)) for i in range(len(val))}.isdisjoint(
        {str(fit.file(i)) for i in range(len(fit))}
    )
    with pytest.raises(ValueError, match="unknown split 'test'; valid splits: train, fit, val"):
        ImageFolder(root, "test")


def test_image_folder_works_with_a_dataloader(tmp_path: Path) -> None:
    ds = ImageFolder(write_folder(tmp_path / "bugs"), "fit")
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=1)
    batches = list(loader)
    assert sum(len(y) for _, y in batches) == len(ds)
    assert batches[0][0].shape == (4, 1, 8, 8) and batches[0][1].dtype == torch.int64


def test_image_folder_sizes_and_channels(tmp_path: Path) -> None:
    # Mixed sizes are resized to the first image's; one colour image makes the folder RGB.
    root = write_folder(tmp_path / "mixed", sizes=((8, 12), (16, 24)), modes=("L", "RGB"))
    ds = ImageFolder(root, "train")
    assert ds.image_size == (8, 12) and ds.in_channels == 3
    assert ds[1][0].shape == (3, 8, 12)
    entry = resolve_data(root)
    assert entry.is_folder and entry.info.num_classes == 2 and entry.test_split is None
    assert entry.load("val").split == "val"


def test_bad_image_folders(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="image folder .* not found"):
        ImageFolder(tmp_path / "nope")
    (tmp_path / "one" / "only").mkdir(parents=True)
    Image.new("L", (4, 4)).save(tmp_path / "one" / "only" / "a.png")
    with pytest.raises(ValueError, match="at least two classes"):
        ImageFolder(tmp_path / "one")
    root = write_folder(tmp_path / "bad")
    (root / "bee" / "zz.jpg").write_bytes(b"garbage")
    with pytest.raises(ValueError, match=r"cannot read .*zz\.jpg"):
        ImageFolder(root)
