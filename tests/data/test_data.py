"""tfam.data: offline image datasets, IDX files, normalisation and batch augmentation."""

from __future__ import annotations

import gzip
import sys

import numpy as np
import pytest
import torch

import tfam.data.sources.images as images_mod
from tfam.data import (
    BatchAugment,
    IDXFormatError,
    ImageDataset,
    compute_mean_std,
    dataset_info,
    default_augment,
    find_fashion_mnist,
    load_dataset,
    read_idx,
    write_idx,
)

FASHION_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}


@pytest.fixture(scope="module")
def digits() -> tuple[ImageDataset, ImageDataset]:
    pytest.importorskip(
        "sklearn", reason="the digits ship with scikit-learn (pip install tfam[data])"
    )
    return load_dataset("digits", "train"), load_dataset("digits", "test")


@pytest.fixture
def no_system_fashion(monkeypatch: pytest.MonkeyPatch, tmp_path):
    """Search only tmp_path/cache after root: the machine's own copies are out of sight."""
    monkeypatch.delenv("TFAM_DATA", raising=False)
    monkeypatch.setattr(images_mod, "FASHION_MNIST_DIRS", [str(tmp_path / "cache")])
    return tmp_path


def write_tiny_fashion(directory, n_train: int = 20, n_test: int = 10, size: int = 28) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", n_train), ("test", n_test)):
        img_name, lbl_name = FASHION_FILES[split]
        write_idx(directory / img_name, rng.integers(0, 256, (n, size, size), dtype=np.uint8))
        write_idx(directory / lbl_name, (np.arange(n) % 10).astype(np.uint8))


# --------------------------------------------------------------------------------- metadata


def test_dataset_info_without_loading():
    d = dataset_info("digits")
    assert (d.image_size, d.in_channels, d.num_classes) == (8, 1, 10)
    f = dataset_info("fashion-mnist")
    assert (f.image_size, f.in_channels, f.num_classes, f.pixel_scale) == (28, 1, 10, 255)
    assert f.classes[0] == "T-shirt/top" and f.classes[-1] == "Ankle boot"
    assert dataset_info("Fashion_MNIST") is f
    with pytest.raises(ValueError, match="digits, fashion-mnist"):
        dataset_info("cifar10")
    with pytest.raises(ValueError, match="valid names"):
        default_augment("cifar10")


# ----------------------------------------------------------------------------------- digits


def test_digits_sizes_and_types(digits):
    train, test = digits
    assert (len(train), len(test)) == (1437, 360)
    assert train.images.shape == (1437, 1, 8, 8) and train.images.dtype == torch.uint8
    assert int(train.images.max()) == 16 and train.pixel_scale == 16
    assert (train.image_size, train.in_channels, train.num_classes) == (8, 1, 10)
    x, y = train.get_batch(torch.arange(5))
    assert x.shape == (5, 1, 8, 8) and x.dtype == torch.float32 and y.dtype == torch.int64


def test_digits_split_is_stratified(digits):
    train, test = digits
    total = train.class_counts() + test.class_counts()
    assert int(total.sum()) == 1797
    # Each class splits 80/20 up to rounding.
    assert (train.class_counts().double() - 0.8 * total).abs().max() <= 1
    assert (train.class_counts() / len(train) - total / 1797).abs().max() < 0.005


def test_digits_split_is_sklearns_and_deterministic(digits):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    train, test = digits
    bunch = load_digits()
    tr, te = train_test_split(np.arange(1797), test_size=0.2, stratify=bunch.target, random_state=0)
    assert torch.equal(train.images[:, 0], torch.from_numpy(bunch.images[tr].astype(np.uint8)))
    assert torch.equal(test.labels, torch.from_numpy(bunch.target[te]))
    images_mod.clear_cache()
    again = load_dataset("digits", "train", seed=0)
    assert torch.equal(again.images, train.images) and torch.equal(again.labels, train.labels)
    other = load_dataset("digits", "train", seed=1)
    assert not torch.equal(other.labels, train.labels)


def test_normalisation_uses_train_statistics(digits):
    train, test = digits
    x_train, _ = train.get_batch(torch.arange(len(train)))
    x_test, _ = test.get_batch(torch.arange(len(test)))
    assert abs(float(x_train.mean())) < 1e-5
    assert abs(float(x_train.std(unbiased=False)) - 1) < 1e-5
    assert torch.equal(test.mean, train.mean) and torch.equal(test.std, train.std)
    assert abs(float(x_test.mean())) > 1e-4  # its own statistics would have made this 0
    # Black (pixel 0) normalises to the dataset's `black`.
    assert torch.allclose(x_train.amin(), train.black)


def test_get_batch_equals_stacked_getitem(digits):
    train, _ = digits
    idx = [5, 0, 1436, 17, 5]
    x, y = train.get_batch(torch.tensor(idx))
    items = [train[i] for i in idx]
    assert torch.equal(x, torch.stack([im for im, _ in items]))
    assert y.tolist() == [label for _, label in items]
    assert torch.equal(train[-1][0], train[1436][0])
    with pytest.raises(IndexError):
        train[1437]


def test_batches_cover_one_epoch(digits):
    train, _ = digits
    g = torch.Generator().manual_seed(3)
    ys = torch.cat([y for _, y in train.batches(100, shuffle=True, generator=g)])
    assert torch.equal(ys.sort().values, train.labels.sort().values)
    assert sum(1 for _ in train.batches(100, drop_last=True)) == 14


def test_arrays_are_cached(digits):
    first, again = load_dataset("digits", "train"), load_dataset("digits", "train")
    assert again.images.data_ptr() == first.images.data_ptr()


def test_missing_sklearn_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    monkeypatch.setitem(sys.modules, "sklearn.model_selection", None)
    with pytest.raises(ImportError, match=r"pip install scikit-learn.*pip install tfam\[data\]"):
        load_dataset("digits", seed=987654)  # a seed nobody cached


# ----------------------------------------------------------------------------- own datasets


def test_image_dataset_bring_your_own():
    imgs = torch.randint(0, 256, (50, 3, 4, 6), dtype=torch.uint8)
    labels = torch.arange(50) % 3
    ds = ImageDataset(imgs, labels, ["a", "b", "c"], name="mine")
    assert (ds.image_size, ds.in_channels, ds.num_classes) == ((4, 6), 3, 3)
    ref = imgs.double().div(255).transpose(0, 1).reshape(3, -1)
    mean, std = compute_mean_std(imgs, 255)
    assert torch.allclose(mean.double(), ref.mean(1), atol=1e-6)
    assert torch.allclose(std.double(), ref.std(1, unbiased=False), atol=1e-6)
    x, _ = ds.get_batch(torch.arange(50))
    assert torch.allclose(x.mean((0, 2, 3)), torch.zeros(3), atol=1e-5)
    held_out = ImageDataset(imgs[:10], labels[:10], ds.classes, mean=ds.mean, std=ds.std)
    assert torch.equal(held_out.get_batch([0, 1])[0], ds.get_batch([0, 1])[0])


def test_image_dataset_validates():
    imgs = torch.zeros(4, 1, 2, 2, dtype=torch.uint8)
    with pytest.raises(ValueError, match="uint8"):
        ImageDataset(imgs.float(), [0, 1, 0, 1], ["a", "b"])
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        ImageDataset(imgs, [0, 1, 2, 1], ["a", "b"])
    with pytest.raises(ValueError, match="N = 4"):
        ImageDataset(imgs, [0, 1], ["a", "b"])
    with pytest.raises(ValueError, match="std must be > 0"):
        ImageDataset(imgs, [0, 1, 0, 1], ["a", "b"], mean=0.5, std=0.0)
    # A constant image set gets std 1 rather than a division by zero.
    assert ImageDataset(imgs, [0, 1, 0, 1], ["a", "b"]).std.tolist() == [1.0]


# ------------------------------------------------------------------------------ augmentation


def marker_batch(b: int = 64, c: int = 1, h: int = 8, w: int = 8, at=(3, 2)) -> torch.Tensor:
    x = torch.zeros(b, c, h, w)
    x[:, :, at[0], at[1]] = 1.0
    return x


def test_augment_is_deterministic_per_generator():
    x = torch.randn(32, 2, 8, 8)
    aug = BatchAugment(padding=2, flip=True)
    a = aug(x, torch.Generator().manual_seed(7), fill=-1.0)
    b = aug(x, torch.Generator().manual_seed(7), fill=-1.0)
    c = aug(x, torch.Generator().manual_seed(8), fill=-1.0)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_augment_identity():
    x = torch.randn(16, 3, 5, 7)
    g = torch.Generator().manual_seed(0)
    assert torch.equal(BatchAugment(padding=0, flip=False)(x, g), x)


def test_crop_shifts_content():
    p, fill = 2, -0.5
    x = marker_batch(at=(3, 2))
    out = BatchAugment(padding=p, flip=False)(x, torch.Generator().manual_seed(0), fill=fill)
    shifts = set()
    for i in range(len(out)):
        hits = (out[i, 0] == 1.0).nonzero().tolist()
        assert len(hits) == 1  # the marker is never cropped away at this position
        ((r, col),) = hits
        dy, dx = r - 3, col - 2
        assert -p <= dy <= p and -p <= dx <= p
        shifts.add((dy, dx))
        # Everything else is the original black (0) or the padding fill, in the right places.
        padded = torch.full((8 + 2 * p, 8 + 2 * p), fill)
        padded[p : p + 8, p : p + 8] = x[i, 0]
        oy, ox = p - dy, p - dx
        assert torch.equal(out[i, 0], padded[oy : oy + 8, ox : ox + 8])
    assert len(shifts) > 10  # 25 possible shifts over 64 images: the crop really moves


def test_flip_flips():
    x = marker_batch(at=(1, 2))
    out = BatchAugment(padding=0, flip=True)(x, torch.Generator().manual_seed(0))
    flipped = [bool(out[i, 0, 1, 8 - 1 - 2] == 1.0) for i in range(len(out))]
    for i, f in enumerate(flipped):
        assert torch.equal(out[i], x[i].flip(-1) if f else x[i])
    assert 10 < sum(flipped) < 54


def test_padding_uses_per_channel_fill():
    x = torch.ones(64, 2, 4, 4)
    out = BatchAugment(padding=3)(x, torch.Generator().manual_seed(0), fill=[-2.0, -3.0])
    assert set(out[:, 0].unique().tolist()) == {1.0, -2.0}
    assert set(out[:, 1].unique().tolist()) == {1.0, -3.0}
    with pytest.raises(ValueError, match="1 or 2 values"):
        BatchAugment(padding=1)(x, fill=[0.0, 0.0, 0.0])


def test_erase_replaces_one_rectangle_with_noise():
    x = torch.full((256, 2, 10, 12), 5.0)  # far from N(0, 1) noise: erased pixels stand out
    out = BatchAugment(erase=1.0)(x, torch.Generator().manual_seed(0))
    erased = out != 5.0
    assert torch.equal(erased[:, 0], erased[:, 1])  # one rectangle through every channel
    rows, cols = erased[:, 0].any(2), erased[:, 0].any(1)
    for i in range(len(x)):
        # The erased pixels fill exactly the box their rows and columns span, and nothing else.
        box = rows[i][:, None] & cols[i][None, :]
        assert torch.equal(erased[i, 0], box)
        area = int(box.sum())
        assert 1 <= area <= 48  # 1/3 of 120 = 40, and each side rounded up by at most 0.5
    areas = erased[:, 0].flatten(1).sum(1).double() / 120
    assert 0.1 < float(areas.mean()) < 0.25  # uniform in [0.02, 1/3] has mean 0.18
    assert abs(float(out[erased].mean())) < 0.1 and 0.9 < float(out[erased].std()) < 1.1
    again = BatchAugment(erase=1.0)(x, torch.Generator().manual_seed(0))
    assert torch.equal(out, again)
    half = BatchAugment(erase=0.5)(x, torch.Generator().manual_seed(1))
    assert 100 < int((half != 5.0).flatten(1).any(1).sum()) < 156
    assert BatchAugment(erase=0.0).is_identity and not BatchAugment(erase=0.1).is_identity


def test_mixup_blends_each_image_with_its_reversed_partner():
    x = torch.randn(6, 2, 5, 7, generator=torch.Generator().manual_seed(0))
    aug = BatchAugment(mixup=0.8)
    assert aug.mixes and aug.is_identity  # __call__ leaves images alone; mix() mixes
    out, lam = aug.mix(x, torch.Generator().manual_seed(3))
    assert lam.shape == (6,) and lam.dtype == torch.float32 and bool((lam == lam[0]).all())
    t = float(lam[0])
    assert 0 < t < 1
    torch.testing.assert_close(out, t * x + (1 - t) * x.flip(0))
    again, lam2 = aug.mix(x, torch.Generator().manual_seed(3))
    assert torch.equal(again, out) and torch.equal(lam2, lam)
    # lam ~ Beta(0.8, 0.8): mean 1/2, variance 1 / (4 (2a + 1)) = 0.0962.
    g = torch.Generator().manual_seed(0)
    draws = torch.tensor([float(aug.mix(x[:2], g)[1][0]) for _ in range(4000)], dtype=torch.float64)
    assert abs(float(draws.mean()) - 0.5) < 0.02
    assert abs(float(draws.var()) - 1 / (4 * 2.6)) < 0.01
    plain, ones = BatchAugment().mix(x)
    assert plain is x and torch.equal(ones, torch.ones(6))


def test_cutmix_pastes_one_box_from_the_partner_and_lam_is_the_share_kept():
    b, h, w = 8, 12, 10
    x = torch.arange(b, dtype=torch.float32).view(b, 1, 1, 1).expand(b, 3, h, w).clone()
    aug = BatchAugment(cutmix=1.0)
    g = torch.Generator().manual_seed(0)
    boxes = 0
    for _ in range(50):
        out, lam = aug.mix(x, g)
        pasted = out != x  # image i holds the value i where it kept its own pixels
        for i in range(b):
            assert torch.equal(out[i][pasted[i]], torch.full_like(out[i][pasted[i]], b - 1 - i))
        box = pasted[0, 0]
        assert torch.equal(pasted, box.expand(b, 3, h, w))  # one box, every image and channel
        rows, cols = box.any(1), box.any(0)
        assert torch.equal(box, rows[:, None] & cols[None, :])  # a rectangle
        torch.testing.assert_close(lam, torch.full((b,), 1 - float(box.sum()) / (h * w)))
        boxes += int(box.any())
    assert boxes > 40
    both = BatchAugment(mixup=0.8, cutmix=1.0)
    g = torch.Generator().manual_seed(1)
    cut = 0
    for _ in range(400):
        out, lam = both.mix(x, g)
        cut += int(bool(((out == x) | (out == x.flip(0))).all()) and float(lam[0]) != 1.0)
    assert 160 < cut < 240  # half the batches get CutMix (CUTMIX_SHARE), the rest Mixup
    assert both.describe() == "mixup 0.8, cutmix 1"
    assert repr(both) == "BatchAugment(padding=0, flip=False, mixup=0.8, cutmix=1)"


def test_augment_validates_arguments():
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="padding"):
            BatchAugment(padding=bad)
    with pytest.raises(ValueError, match="flip"):
        BatchAugment(flip="yes")
    for bad in (-0.1, 1.5, True, "0.2"):
        with pytest.raises(ValueError, match=r"erase=.* is invalid: expected a probability"):
            BatchAugment(erase=bad)
    for name in ("mixup", "cutmix"):
        for bad in (-0.5, True, "1"):
            with pytest.raises(ValueError, match=rf"{name}=.* is invalid: expected Beta's alpha"):
                BatchAugment(**{name: bad})
    with pytest.raises(ValueError, match="float images"):
        BatchAugment(padding=1)(torch.zeros(2, 8, 8))


def test_default_augment_through_get_batch(digits):
    train, _ = digits
    aug = default_augment("digits")
    assert (aug.padding, aug.flip) == (1, False)
    fashion = default_augment("fashion-mnist")
    assert (fashion.padding, fashion.flip) == (1, True)  # 2 px crops slow the patch-4 ViT down
    override = default_augment("fashion-mnist", padding=3, flip=False)
    assert (override.padding, override.flip) == (3, False)
    idx = torch.arange(64)
    a, ya = train.get_batch(idx, augment=aug, generator=torch.Generator().manual_seed(1))
    b, _ = train.get_batch(idx, augment=aug, generator=torch.Generator().manual_seed(1))
    plain, y = train.get_batch(idx)
    assert torch.equal(a, b) and torch.equal(ya, y) and not torch.equal(a, plain)
    assert float(a.min()) >= float(train.black[0]) - 1e-6  # padding is black, nothing darker


# ------------------------------------------------------------------------------- IDX files


@pytest.mark.parametrize("name", ["x-idx3-ubyte", "x-idx3-ubyte.gz"])
def test_idx_round_trip(tmp_path, name):
    arrays = [
        np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4),
        np.array([-5, 7, 1 << 20], dtype=np.int32),
        np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2),
    ]
    for arr in arrays:
        write_idx(tmp_path / name, arr)
        back = read_idx(tmp_path / name)
        assert back.dtype == arr.dtype and back.shape == arr.shape
        assert np.array_equal(back, arr)
        assert back.flags.writeable


def test_idx_corrupt_files_give_clear_errors(tmp_path):
    arr = np.arange(2 * 28 * 28, dtype=np.uint8).reshape(2, 28, 28)
    write_idx(tmp_path / "ok", arr)
    raw = (tmp_path / "ok").read_bytes()

    (tmp_path / "short").write_bytes(raw[:-10])
    with pytest.raises(
        IDXFormatError, match=r"short: truncated IDX file.*1568 data bytes, found 1558"
    ):
        read_idx(tmp_path / "short")
    (tmp_path / "short.gz").write_bytes(gzip.compress(raw[:-10]))
    with pytest.raises(IDXFormatError, match="truncated"):
        read_idx(tmp_path / "short.gz")
    (tmp_path / "cut.gz").write_bytes(gzip.compress(raw)[:-30])  # a download cut short
    with pytest.raises(IDXFormatError, match="cut.gz"):
        read_idx(tmp_path / "cut.gz")
    (tmp_path / "long").write_bytes(raw + b"\0")
    with pytest.raises(IDXFormatError, match="bytes after"):
        read_idx(tmp_path / "long")
    (tmp_path / "html.gz").write_bytes(b"<html>404 Not Found</html>")
    with pytest.raises(IDXFormatError, match="magic number"):
        read_idx(tmp_path / "html.gz")
    (tmp_path / "header").write_bytes(raw[:6])
    with pytest.raises(IDXFormatError, match="truncated"):
        read_idx(tmp_path / "header")


# --------------------------------------------------------------------------- Fashion-MNIST


def test_fashion_missing_says_where_and_how(no_system_fashion):
    tmp = no_system_fashion
    (tmp / "root").mkdir()
    (tmp / "root" / FASHION_FILES["train"][0]).write_bytes(b"")  # a partial copy
    with pytest.raises(FileNotFoundError) as err:
        load_dataset("fashion-mnist", root=tmp / "root")
    msg = str(err.value)
    assert str(tmp / "root") in msg and str(tmp / "cache") in msg
    assert "missing train-labels-idx1-ubyte" in msg
    assert "apt-get install dataset-fashion-mnist" in msg
    assert "zalandoresearch/fashion-mnist" in msg and "~/.cache/tfam/fashion-mnist" in msg


def test_fashion_from_root_and_env(no_system_fashion, monkeypatch):
    tmp = no_system_fashion
    write_tiny_fashion(tmp / "mine")
    train = load_dataset("fashion-mnist", "train", root=tmp / "mine")
    test = load_dataset("fashion_mnist", "test", root=tmp / "mine")
    assert (len(train), len(test)) == (20, 10) and train.images.shape[1:] == (1, 28, 28)
    assert torch.equal(test.mean, train.mean) and train.classes[1] == "Trouser"
    monkeypatch.setenv("TFAM_DATA", str(tmp))
    write_tiny_fashion(tmp / "fashion-mnist", n_train=30)
    assert len(load_dataset("fashion-mnist")) == 30
    assert find_fashion_mnist(tmp / "mine")["train"][0].parent == tmp / "mine"  # root first


def test_fashion_wrong_image_size_is_rejected(no_system_fashion):
    write_tiny_fashion(no_system_fashion / "cache", size=27)
    with pytest.raises(ValueError, match=r"\(N, 28, 28\)"):
        load_dataset("fashion-mnist")


def test_fashion_mnist_official(monkeypatch):
    try:
        files = find_fashion_mnist()
    except FileNotFoundError:
        pytest.skip("Fashion-MNIST files not installed (apt-get install dataset-fashion-mnist)")
    train = load_dataset("fashion-mnist", "train")
    test = load_dataset("fashion-mnist", "test")
    assert train.images.shape == (60000, 1, 28, 28) and test.images.shape == (10000, 1, 28, 28)
    assert train.class_counts().tolist() == [6000] * 10
    assert test.class_counts().tolist() == [1000] * 10
    assert torch.equal(test.mean, train.mean) and train.pixel_scale == 255
    assert abs(float(train.mean[0]) - 0.2860) < 1e-3 and abs(float(train.std[0]) - 0.3530) < 1e-3
    # Loading again reads nothing: the same tensors come back from the per-process cache.
    assert load_dataset("fashion-mnist").images.data_ptr() == train.images.data_ptr()
    assert files["train"][0].name.startswith("train-images-idx3-ubyte")


def test_stratified_index_keeps_class_shares_and_is_fixed_by_its_seed() -> None:
    from tfam.data.sources.images import stratified_index, subset_size

    labels = torch.tensor([0] * 60 + [1] * 30 + [2] * 10)
    idx = stratified_index(labels, 10, seed=0)
    assert idx.tolist() == sorted(set(idx.tolist())) and len(idx) == 10
    assert torch.bincount(labels[idx], minlength=3).tolist() == [6, 3, 1]
    assert torch.equal(idx, stratified_index(labels, 10, seed=0))
    assert not torch.equal(idx, stratified_index(labels, 10, seed=1))
    # Largest remainders: 7 of 100 is 4.2, 2.1 and 0.7 -> 4, 2, 1 (the counts add up).
    assert torch.bincount(labels[stratified_index(labels, 7, 0)], minlength=3).tolist() == [4, 2, 1]
    assert len(stratified_index(labels, 100, 0)) == 100
    assert (
        subset_size(0.1, 100) == 10
        and subset_size(0.001, 100) == 1
        and subset_size(100, 100) == 100
    )
    for bad in (0, 1.5, 101, -3):
        with pytest.raises(ValueError, match="is invalid: expected a fraction in"):
            subset_size(bad, 100)


def test_subsets_of_images_and_pixel_sequences_keep_their_facts() -> None:
    from tfam.data.sources.pixels import load_pixels

    ds = load_dataset("digits", "fit")
    part = ds.subset(torch.tensor([5, 2]))
    assert (
        torch.equal(part.images, ds.images[[5, 2]])
        and part.labels.tolist() == ds.labels[[5, 2]].tolist()
    )
    assert torch.equal(part.mean, ds.mean) and torch.equal(part[0][0], ds[5][0])
    pix = load_pixels("digits", "fit")
    sub = pix.subset(torch.tensor([3, 0]))
    assert torch.equal(sub.ids, pix.ids[[3, 0]]) and torch.equal(sub.images, pix.images[[3, 0]])
    assert sub.labels.tolist() == pix.labels[[3, 0]].tolist() and sub.palette is pix.palette
    assert len(pix) == 1295 and len(sub) == 2


def test_batch_augment_describes_itself() -> None:
    from tfam.data.vision.augment import BatchAugment

    assert BatchAugment(padding=1, flip=True, erase=0.25).describe() == "pad 1, flip, erase 0.25"
    assert BatchAugment(padding=0, flip=False).describe() == "none"
