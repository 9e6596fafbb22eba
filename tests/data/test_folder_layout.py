"""Image folders in timm's layout (train/ val/ test/: splits as given) and the in-memory fast
path of small folders."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tfam.data.catalog import folder_entry
from tfam.data.sources.folder import ImageFolder, layout_dirs


def _write(root: Path, classes: tuple[str, ...], per_class: int, size: int = 8, seed: int = 0):
    rng = np.random.default_rng(seed)
    for c, name in enumerate(classes):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            a = rng.integers(0, 60, (size, size)).astype(np.uint8)
            a[c : c + 2] = 220
            Image.fromarray(a, mode="L").save(root / name / f"{i:03d}.png")


@pytest.fixture
def timm_folder(tmp_path: Path) -> Path:
    root = tmp_path / "timm"
    _write(root / "train", ("cat", "dog"), 5, seed=0)
    _write(root / "validation", ("cat", "dog"), 3, seed=1)
    _write(root / "test", ("cat", "dog"), 2, seed=2)
    return root


def test_timm_layout_splits_are_used_as_given(timm_folder: Path) -> None:
    assert set(layout_dirs(timm_folder)) == {"train", "val", "test"}
    fit, val, test = (ImageFolder(timm_folder, s) for s in ("fit", "val", "test"))
    assert (len(fit), len(val), len(test)) == (10, 6, 4)
    assert len(ImageFolder(timm_folder, "train")) == 10  # no holdout: fit is train/
    assert fit.classes == val.classes == test.classes == ("cat", "dog")
    assert [p.parent.parent.name for p in map(val.file, range(len(val)))] == ["validation"] * 6
    assert val.labels.tolist() == [0, 0, 0, 1, 1, 1]
    # Normalised with train/'s statistics, whatever the split.
    assert torch.equal(val.mean, fit.mean) and torch.equal(test.std, fit.std)
    entry = folder_entry(timm_folder)
    assert entry.splits == ("train", "fit", "val", "test") and entry.test_split == "test"
    assert "splits as given (timm layout): 10 train/ / 6 val/ / 4 test/" in entry.info.description
    assert entry.info.train_size == 10 and entry.info.test_size == 4


def test_timm_layout_without_test_has_no_test_split(timm_folder: Path) -> None:
    shutil.rmtree(timm_folder / "test")
    entry = folder_entry(timm_folder)
    assert entry.test_split is None and "test" not in entry.splits
    with pytest.raises(ValueError, match="unknown split 'test'"):
        ImageFolder(timm_folder, "test")


def test_plain_folder_still_holds_out_its_validation(tmp_path: Path) -> None:
    _write(tmp_path / "plain", ("a", "b"), 10)
    entry = folder_entry(tmp_path / "plain")
    assert layout_dirs(tmp_path / "plain") is None
    assert "16 fit / 4 val (20% stratified holdout, seeded)" in entry.info.description
    assert entry.test_split is None


@pytest.mark.parametrize(
    ("remove", "message"),
    [
        ("validation/dog", "validation/ has no images of class 'dog'"),
        ("test/cat", "test/ has no images of class 'cat'"),
    ],
)
def test_a_class_missing_from_a_split_is_one_line(timm_folder: Path, remove: str, message: str):
    shutil.rmtree(timm_folder / remove)
    with pytest.raises(ValueError) as err:
        folder_entry(timm_folder)
    text = str(err.value)
    assert message in text and str(timm_folder.resolve()) in text and "\n" not in text


def test_a_class_only_in_a_later_split_is_named(timm_folder: Path) -> None:
    _write(timm_folder / "validation", ("emu",), 1)
    with pytest.raises(ValueError, match="validation/ has class 'emu', which train/ lacks"):
        folder_entry(timm_folder)


def test_small_folder_fast_path_equals_the_items(timm_folder: Path) -> None:
    ds = ImageFolder(timm_folder, "val")
    x, y = ds.get_batch(torch.tensor([4, 0, 2]))
    assert torch.equal(x, torch.stack([ds[i][0] for i in (4, 0, 2)]))
    assert y.tolist() == [ds[i][1] for i in (4, 0, 2)]


def test_copies_read_their_own_statistics_and_items(timm_folder: Path) -> None:
    # The in-memory get_batch is bound per instance: a copy must not read the original's.
    ds = ImageFolder(timm_folder, "train")
    other = ds.with_stats([0.5], [0.25])
    x, _ = other.get_batch(torch.tensor([0, 3]))
    assert torch.equal(x, torch.stack([other[i][0] for i in (0, 3)]))
    assert not torch.allclose(x, ds.get_batch(torch.tensor([0, 3]))[0])
    part = ds.subset(torch.tensor([7, 1]))
    assert len(part) == 2 and part.file(0) == ds.file(7) and part.labels.tolist() == [1, 0]
    x, y = part.get_batch(torch.tensor([0, 1]))
    assert torch.equal(x, torch.stack([ds[7][0], ds[1][0]])) and y.tolist() == [1, 0]


def test_folder_entry_resizes_to_the_size_asked(tmp_path: Path) -> None:
    _write(tmp_path / "odd", ("a", "b"), 3, size=37)
    entry = folder_entry(tmp_path / "odd", image_size=40)
    assert entry.info.image_size == 40
    assert entry.load("fit")[0][0].shape == (1, 40, 40)
