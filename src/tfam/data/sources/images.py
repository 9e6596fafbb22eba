"""Image classification data held in memory: scikit-learn's digits, Fashion-MNIST, your arrays.

Every dataset is an :class:`ImageDataset`: uint8 images (N, C, H, W) and int64 labels (N,) held
in memory, normalised on the fly — ``x = (pixel / pixel_scale - mean) / std`` per channel, with
mean and std computed on the TRAIN split and reused for the test split.

    train = load_digits("fit")                      # train minus the validation holdout
    val, test = load_digits("val"), load_digits("test")  # normalised with train's mean/std
    x, y = train.get_batch(torch.arange(128))       # (128, 1, 8, 8) float32, (128,) int64

Loaded arrays are cached per process (see :func:`clear_cache`): loading train and then test
reads each file once.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tfam.data.sources.idx import read_idx
from tfam.data.vision.augment import BatchAugment

__all__ = [
    "DIGITS",
    "FASHION_MNIST",
    "FASHION_MNIST_DIRS",
    "SPLITS",
    "DatasetInfo",
    "ImageDataset",
    "check_split",
    "clear_cache",
    "compute_mean_std",
    "find_fashion_mnist",
    "holdout_split",
    "load_digits",
    "load_fashion_mnist",
]

# "train" is the published training split, whole; "fit" is train minus "val", a fixed, seeded,
# class-stratified holdout of train used to choose the best epoch and to stop early; "test" is
# reported once at the end. fit and val together are train.
SPLITS = ("train", "fit", "val", "test")
VAL_FRACTION = 0.1


@dataclass(frozen=True)
class DatasetInfo:
    """What a model needs to know about a dataset, without loading it."""

    name: str
    image_size: int | tuple[int, int]
    in_channels: int
    classes: tuple[str, ...]
    pixel_scale: float
    train_size: int
    test_size: int
    description: str

    @property
    def num_classes(self) -> int:
        return len(self.classes)


DIGITS = DatasetInfo(
    name="digits",
    image_size=8,
    in_channels=1,
    classes=tuple(str(i) for i in range(10)),
    pixel_scale=16,
    train_size=1437,
    test_size=360,
    description="scikit-learn's bundled 8x8 handwritten digits (UCI), stratified 80/20 split",
)
FASHION_MNIST = DatasetInfo(
    name="fashion-mnist",
    image_size=28,
    in_channels=1,
    classes=(
        "T-shirt/top",
        "Trouser",
        "Pullover",
        "Dress",
        "Coat",
        "Sandal",
        "Shirt",
        "Sneaker",
        "Bag",
        "Ankle boot",
    ),
    pixel_scale=255,
    train_size=60000,
    test_size=10000,
    description="Zalando's 28x28 grey clothing images, official 60k/10k split",
)


def check_split(split: str, splits: Sequence[str] = SPLITS) -> str:
    if split not in splits:
        raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(splits)}")
    return split


def holdout_split(labels: Tensor, fraction: float, seed: int) -> tuple[Tensor, Tensor]:
    """(keep, holdout) sorted index tensors: a class-stratified random ``fraction`` of each
    class held out, drawn from ``torch.Generator().manual_seed(seed)`` — the same every time.

    Each class with at least two examples gives ``max(1, round(n * fraction))`` of them, and
    keeps at least one; a class with a single example is kept whole.
    """
    if not 0 < fraction < 1:
        raise ValueError(f"fraction={fraction!r} is invalid: expected a number in (0, 1)")
    labels = torch.as_tensor(labels).reshape(-1)
    g = torch.Generator().manual_seed(int(seed))
    held = []
    for c in torch.unique(labels).tolist():
        idx = (labels == c).nonzero().squeeze(1)
        n = idx.numel()
        if n < 2:
            continue
        k = min(n - 1, max(1, round(n * fraction)))
        held.append(idx[torch.randperm(n, generator=g)[:k]])
    holdout = torch.cat(held).sort().values if held else torch.empty(0, dtype=torch.int64)
    mask = torch.ones(labels.numel(), dtype=torch.bool)
    mask[holdout] = False
    return mask.nonzero().squeeze(1), holdout


def subset_size(size: float, n: int, what: str = "size") -> int:
    """How many of ``n`` examples ``size`` asks for: a fraction in (0, 1) of them (rounded, at
    least 1), or a count from 1 to ``n`` (a whole number)."""
    if 0 < size < 1:
        return max(1, round(size * n))
    if size >= 1 and float(size).is_integer() and size <= n:
        return int(size)
    raise ValueError(
        f"{what} {size:g} is invalid: expected a fraction in (0, 1) or a whole number of "
        f"examples from 1 to {n}"
    )


def stratified_index(labels: Tensor, size: int, seed: int) -> Tensor:
    """Sorted indices (size,) of ``size`` examples, each class represented in proportion to its
    share of ``labels`` (N,) (largest remainders, so the counts add up to ``size``), drawn from
    ``torch.Generator().manual_seed(seed)``: the same every time."""
    labels = torch.as_tensor(labels).reshape(-1)
    if not 1 <= size <= labels.numel():
        raise ValueError(f"size={size!r} is invalid: expected 1 to {labels.numel()}")
    classes, counts = torch.unique(labels, return_counts=True)
    quota = counts.to(torch.float64) * size / labels.numel()
    take = quota.floor().to(torch.int64)
    # The classes with the largest remainders take the examples the floors left over.
    extra = (quota - take).argsort(descending=True, stable=True)[: size - int(take.sum())]
    take[extra] += 1
    g = torch.Generator().manual_seed(int(seed))
    picked = []
    for c, k in zip(classes.tolist(), take.tolist(), strict=True):
        idx = (labels == c).nonzero().squeeze(1)
        picked.append(idx[torch.randperm(idx.numel(), generator=g)[:k]])
    return torch.cat(picked).sort().values


def train_subset(
    dataset: Any, size: float, seed: int = 0, what: str = "size", data: str | None = None
) -> Any:
    """``size`` (a fraction or a count, :func:`subset_size`) of a labelled ``dataset`` with a
    ``subset(index)`` method (images, image folders, pixel sequences), class-stratified
    (:func:`stratified_index`) and drawn with ``seed``. ``what`` and ``data`` name the option
    and the data in errors."""
    if not hasattr(dataset, "subset") or not hasattr(dataset, "labels"):
        raise ValueError(
            f"{what} {size:g} is invalid for {data or type(dataset).__name__}: "
            "only labelled images (a catalog image set or an image folder) and pixel sequences "
            "can be subset"
        )
    n = subset_size(size, len(dataset), what=what)
    return dataset.subset(stratified_index(dataset.labels, n, seed=seed))


def _select(
    arrays: dict[str, Tensor], split: str, fraction: float, seed: int
) -> tuple[Tensor, Tensor]:
    """(images, labels) of ``split`` from arrays holding train_* and test_* tensors."""
    if split in ("train", "test"):
        return arrays[f"{split}_images"], arrays[f"{split}_labels"]
    keep, holdout = holdout_split(arrays["train_labels"], fraction, seed)
    idx = keep if split == "fit" else holdout
    return arrays["train_images"].index_select(0, idx), arrays["train_labels"].index_select(0, idx)


# ---------------------------------------------------------------------------------------------
# Normalisation statistics


def compute_mean_std(
    images: Tensor | np.ndarray, pixel_scale: float = 255
) -> tuple[Tensor, Tensor]:
    """Per-channel mean and (population) std of ``images / pixel_scale``; float32 tensors (C,).

    images: (N, C, H, W). For uint8 the statistics are exact (from a 256-bin histogram per
    channel, computed in float64 without a float copy of the data). A channel with zero spread
    gets std 1, so normalising it stays finite.
    """
    images = torch.as_tensor(images)
    if images.ndim != 4:
        raise ValueError(f"images must be (N, C, H, W), got shape {tuple(images.shape)}")
    if images.shape[0] == 0:
        raise ValueError("cannot compute mean/std of an empty image set")
    if not pixel_scale > 0:
        raise ValueError(f"pixel_scale must be > 0, got {pixel_scale}")
    channels = images.shape[1]
    mean = torch.empty(channels, dtype=torch.float64)
    std = torch.empty(channels, dtype=torch.float64)
    values = torch.arange(256, dtype=torch.float64) / pixel_scale
    for c in range(channels):
        plane = images[:, c].reshape(-1)
        if images.dtype == torch.uint8:
            counts = torch.bincount(plane, minlength=256).to(torch.float64)
            n = counts.sum()
            mean[c] = (counts * values).sum() / n
            std[c] = ((counts * (values - mean[c]) ** 2).sum() / n).sqrt()
        else:
            plane = plane.to(torch.float64) / pixel_scale
            mean[c] = plane.mean()
            std[c] = plane.std(unbiased=False)
    std[std == 0] = 1.0
    return mean.float(), std.float()


def _per_channel(value, channels: int, what: str) -> Tensor:
    t = torch.as_tensor(value, dtype=torch.float32).reshape(-1)
    if t.numel() == 1:
        t = t.expand(channels)
    if t.numel() != channels:
        raise ValueError(f"{what} needs 1 or {channels} values (one per channel), got {t.numel()}")
    return t.clone()


# ---------------------------------------------------------------------------------------------
# The dataset


class ImageDataset(torch.utils.data.Dataset):
    """Labelled images held as uint8 in memory and normalised on the fly.

    images: (N, C, H, W) uint8 (tensor or array). labels: (N,) integers in [0, len(classes)).
    mean, std: per-channel statistics of ``images / pixel_scale`` (1 or C values); None computes
    them from ``images`` — right for a training set; pass the training set's for a test set.

    ``ds[i]`` -> (image (C, H, W) float32, label int); ``ds.get_batch(indices)`` ->
    (images (B, C, H, W) float32, labels (B,) int64), one vectorised gather.
    """

    def __init__(
        self,
        images: Tensor | np.ndarray,
        labels: Tensor | np.ndarray | Sequence[int],
        classes: Sequence[str],
        mean: Tensor | Sequence[float] | float | None = None,
        std: Tensor | Sequence[float] | float | None = None,
        pixel_scale: float = 255,
        name: str = "custom",
        split: str | None = None,
    ) -> None:
        images = torch.as_tensor(images)
        labels = torch.as_tensor(labels)
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise ValueError(
                f"images must be a uint8 (N, C, H, W) tensor, got {images.dtype} of shape "
                f"{tuple(images.shape)}"
            )
        if labels.ndim != 1 or labels.shape[0] != images.shape[0]:
            raise ValueError(
                f"labels must be (N,) with N = {images.shape[0]} images, got shape "
                f"{tuple(labels.shape)}"
            )
        if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
            raise ValueError(f"labels must be integers, got {labels.dtype}")
        self.classes = tuple(str(c) for c in classes)
        if not self.classes:
            raise ValueError("classes must name at least one class")
        if labels.numel() and (labels.min() < 0 or labels.max() >= len(self.classes)):
            raise ValueError(
                f"labels must lie in [0, {len(self.classes)}) for {len(self.classes)} classes, "
                f"found [{int(labels.min())}, {int(labels.max())}]"
            )
        if not pixel_scale > 0:
            raise ValueError(f"pixel_scale must be > 0, got {pixel_scale}")
        channels = images.shape[1]
        if mean is None or std is None:
            m, s = compute_mean_std(images, pixel_scale)
            mean = m if mean is None else mean
            std = s if std is None else std
        self.mean = _per_channel(mean, channels, "mean")
        self.std = _per_channel(std, channels, "std")
        if not bool((self.std > 0).all()):
            raise ValueError(f"std must be > 0 in every channel, got {self.std.tolist()}")
        self.images = images.contiguous()
        self.labels = labels.to(torch.int64)
        self.pixel_scale = float(pixel_scale)
        self.name = name
        self.split = split
        # x = pixel * scale + shift  ==  (pixel / pixel_scale - mean) / std
        self._scale = (1.0 / (self.pixel_scale * self.std)).view(-1, 1, 1)
        self._shift = (-self.mean / self.std).view(-1, 1, 1)

    # -- shape facts --------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.images.shape[0]

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def in_channels(self) -> int:
        return self.images.shape[1]

    @property
    def image_size(self) -> int | tuple[int, int]:
        """int for square images, else (height, width) — as model configs take it."""
        h, w = self.images.shape[2:]
        return h if h == w else (h, w)

    @property
    def black(self) -> Tensor:
        """(C,) value a black (zero) pixel takes after normalisation: (0 - mean) / std."""
        return self._shift.view(-1).clone()

    # -- data ---------------------------------------------------------------------------------
    def normalize(self, images: Tensor) -> Tensor:
        """uint8 (..., C, H, W) -> float32 normalised with this dataset's statistics."""
        return images.to(torch.float32).mul_(self._scale).add_(self._shift)

    def get_batch(
        self,
        indices: Tensor | Sequence[int] | np.ndarray,
        augment: BatchAugment | None = None,
        generator: torch.Generator | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Images (B, C, H, W) float32 and labels (B,) int64 for ``indices`` (B,), each in [0, N).

        With ``augment``, applies it to the batch with this dataset's black as padding fill and
        ``generator`` for its random draws.
        """
        idx = torch.as_tensor(indices, dtype=torch.int64).reshape(-1)
        # index_select: a plain gather of rows, several times faster than images[idx].
        x = self.normalize(self.images.index_select(0, idx))
        if augment is not None:
            x = augment(x, generator=generator, fill=self._shift.view(-1))
        return x, self.labels.index_select(0, idx)

    def __getitem__(self, i: int) -> tuple[Tensor, int]:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for {n} images")
        x, y = self.get_batch([i % n])
        return x[0], int(y[0])

    def subset(self, index: Tensor) -> ImageDataset:
        """The images ``index`` (n,), normalised with this dataset's statistics."""
        index = torch.as_tensor(index, dtype=torch.int64)
        return ImageDataset(self.images.index_select(0, index), self.labels.index_select(0, index),
                            self.classes, mean=self.mean, std=self.std,
                            pixel_scale=self.pixel_scale, name=self.name, split=self.split)  # fmt: skip

    def batches(
        self,
        batch_size: int,
        *,
        shuffle: bool = False,
        generator: torch.Generator | None = None,
        augment: BatchAugment | None = None,
        drop_last: bool = False,
    ) -> Iterator[tuple[Tensor, Tensor]]:
        """One epoch of (images, labels) batches; order and augmentation drawn from ``generator``."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        n = len(self)
        order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
        stop = n - n % batch_size if drop_last else n
        for start in range(0, stop, batch_size):
            yield self.get_batch(order[start : start + batch_size], augment, generator)

    def stored(self, i: int) -> Tensor:
        """Image ``i`` as stored: (C, H, W) uint8 in the dataset's levels (0..pixel_scale)."""
        return self.images[i]

    def with_stats(
        self, mean: Sequence[float] | Tensor, std: Sequence[float] | Tensor
    ) -> ImageDataset:
        """The same images and labels, normalised with other statistics (a trained model's)."""
        return ImageDataset(
            self.images,
            self.labels,
            self.classes,
            mean=mean,
            std=std,
            pixel_scale=self.pixel_scale,
            name=self.name,
            split=self.split,
        )

    def class_counts(self) -> Tensor:
        """(num_classes,) number of images per class."""
        return torch.bincount(self.labels, minlength=self.num_classes)

    def __repr__(self) -> str:
        split = f", split={self.split!r}" if self.split else ""
        return (
            f"ImageDataset(name={self.name!r}{split}, n={len(self)}, images="
            f"{tuple(self.images.shape[1:])}, classes={self.num_classes}, "
            f"mean={[round(v, 4) for v in self.mean.tolist()]}, "
            f"std={[round(v, 4) for v in self.std.tolist()]})"
        )


# ---------------------------------------------------------------------------------------------
# scikit-learn digits


@functools.cache
def _digits_arrays(seed: int) -> dict[str, Tensor]:
    try:
        from sklearn.datasets import load_digits as sk_load_digits
        from sklearn.model_selection import train_test_split
    except ImportError as err:
        raise ImportError(
            "the 'digits' dataset comes with scikit-learn, which is not installed: "
            "pip install scikit-learn  (or: pip install tfam[data])"
        ) from err
    bunch = sk_load_digits()
    images = torch.from_numpy(bunch.images.astype(np.uint8)).unsqueeze(1)  # (1797, 1, 8, 8)
    labels = torch.from_numpy(bunch.target.astype(np.int64))
    train_idx, test_idx = train_test_split(
        np.arange(len(labels)), test_size=0.2, stratify=bunch.target, random_state=seed
    )
    train_idx, test_idx = torch.from_numpy(train_idx), torch.from_numpy(test_idx)
    out = {
        "train_images": images[train_idx].contiguous(),
        "train_labels": labels[train_idx],
        "test_images": images[test_idx].contiguous(),
        "test_labels": labels[test_idx],
    }
    out["mean"], out["std"] = compute_mean_std(out["train_images"], DIGITS.pixel_scale)
    return out


def load_digits(
    split: str = "train", *, seed: int = 0, val_fraction: float = VAL_FRACTION
) -> ImageDataset:
    """scikit-learn's 8x8 digits (1,797 images, pixels 0..16): 1,437 train / 360 test.

    The split is sklearn's ``train_test_split(test_size=0.2, stratify=y, random_state=seed)``;
    "val" is a stratified ``val_fraction`` of train (seeded with ``seed``), "fit" the rest.
    """
    check_split(split)
    info, arrays = DIGITS, _digits_arrays(int(seed))
    images, labels = _select(arrays, split, val_fraction, seed)
    return ImageDataset(
        images,
        labels,
        info.classes,
        mean=arrays["mean"],
        std=arrays["std"],
        pixel_scale=info.pixel_scale,
        name=info.name,
        split=split,
    )


# ---------------------------------------------------------------------------------------------
# Fashion-MNIST

# Searched after the ``root`` argument and $TFAM_DATA/fashion-mnist, in this order.
FASHION_MNIST_DIRS: list[str] = [
    "~/.cache/tfam/fashion-mnist",
    "/usr/share/datasets/fashion-mnist",  # Debian package dataset-fashion-mnist
]
_FASHION_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
_FASHION_URL = "https://github.com/zalandoresearch/fashion-mnist (data/fashion/)"


def _fashion_candidates(root: str | os.PathLike | None) -> list[Path]:
    dirs: list[Path] = []
    if root is not None:
        dirs += [Path(root).expanduser(), Path(root).expanduser() / "fashion-mnist"]
    env = os.environ.get("TFAM_DATA")
    if env:
        dirs.append(Path(env).expanduser() / "fashion-mnist")
    dirs += [Path(d).expanduser() for d in FASHION_MNIST_DIRS]
    return dirs


def _find_file(directory: Path, stem: str) -> Path | None:
    for name in (stem + ".gz", stem):
        if (directory / name).is_file():
            return directory / name
    return None


def find_fashion_mnist(root: str | os.PathLike | None = None) -> dict[str, tuple[Path, Path]]:
    """The four Fashion-MNIST IDX files, from the first directory that holds all of them.

    Searched in order: ``root`` (and ``root/fashion-mnist``), ``$TFAM_DATA/fashion-mnist``, then
    :data:`FASHION_MNIST_DIRS`. Returns {"train": (images, labels), "test": (images, labels)}.
    Raises FileNotFoundError listing what was searched and how to get the data.
    """
    searched = []
    for directory in _fashion_candidates(root):
        if not directory.is_dir():
            searched.append(f"  {directory}  (no such directory)")
            continue
        found = {
            stem: _find_file(directory, stem) for pair in _FASHION_FILES.values() for stem in pair
        }
        missing = [stem for stem, path in found.items() if path is None]
        if not missing:
            return {s: (found[i], found[lbl]) for s, (i, lbl) in _FASHION_FILES.items()}
        searched.append(f"  {directory}  (missing {', '.join(m + '[.gz]' for m in missing)})")
    raise FileNotFoundError(
        "Fashion-MNIST not found. Searched:\n"
        + "\n".join(searched)
        + "\nTo get it (tfam never downloads):\n"
        "  sudo apt-get install dataset-fashion-mnist     (Debian/Ubuntu: /usr/share/datasets/fashion-mnist)\n"
        "  or download train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,\n"
        "  t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz from\n"
        f"  {_FASHION_URL} into ~/.cache/tfam/fashion-mnist\n"
        "  (or into any directory you then pass as root=, or into $TFAM_DATA/fashion-mnist)."
    )


def _file_key(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return str(path.resolve()), st.st_size, st.st_mtime_ns


@functools.cache
def _read_fashion_split(
    images_key: tuple[str, int, int], labels_key: tuple[str, int, int]
) -> tuple[Tensor, Tensor]:
    # Keyed by (path, size, mtime) so a replaced file is read again.
    images_path, labels_path = Path(images_key[0]), Path(labels_key[0])
    images, labels = read_idx(images_path), read_idx(labels_path)
    size = FASHION_MNIST.image_size
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (size, size):
        raise ValueError(
            f"{images_path}: expected uint8 images of shape (N, {size}, {size}), got "
            f"{images.dtype} {images.shape}"
        )
    if labels.dtype != np.uint8 or labels.shape != (images.shape[0],):
        raise ValueError(
            f"{labels_path}: expected {images.shape[0]} uint8 labels (one per image in "
            f"{images_path.name}), got {labels.dtype} {labels.shape}"
        )
    if labels.size and labels.max() >= len(FASHION_MNIST.classes):
        raise ValueError(f"{labels_path}: label {labels.max()} out of range 0..9")
    return torch.from_numpy(images).unsqueeze(1), torch.from_numpy(labels.astype(np.int64))


@functools.cache
def _fashion_stats(images_key: tuple[str, int, int], labels_key: tuple[str, int, int]):
    images, _ = _read_fashion_split(images_key, labels_key)
    return compute_mean_std(images, FASHION_MNIST.pixel_scale)


def load_fashion_mnist(
    split: str = "train",
    *,
    root: str | os.PathLike | None = None,
    seed: int = 0,
    val_fraction: float = VAL_FRACTION,
) -> ImageDataset:
    """Fashion-MNIST, the official split: 60,000 train / 10,000 test 28x28 grey images; "val" is
    a stratified ``val_fraction`` of train (seeded with ``seed``), "fit" the rest.

    Read from local IDX files (see :func:`find_fashion_mnist` for where); never downloads.
    """
    check_split(split)
    info, files = FASHION_MNIST, find_fashion_mnist(root)
    train_keys = tuple(_file_key(p) for p in files["train"])
    source = "test" if split == "test" else "train"
    images, labels = _read_fashion_split(*(tuple(_file_key(p) for p in files[source])))
    if split in ("fit", "val"):
        images, labels = _select(
            {"train_images": images, "train_labels": labels}, split, val_fraction, seed
        )
    mean, std = _fashion_stats(*train_keys)
    return ImageDataset(
        images,
        labels,
        info.classes,
        mean=mean,
        std=std,
        pixel_scale=info.pixel_scale,
        name=info.name,
        split=split,
    )


def clear_cache() -> None:
    """Forget every array of digits and Fashion-MNIST loaded in this process."""
    for fn in (_digits_arrays, _read_fashion_split, _fashion_stats):
        fn.cache_clear()
