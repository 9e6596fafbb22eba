"""Your own images: a folder with one sub-folder per class, decoded one image at a time.

    photos/
      cat/ 001.png 002.jpg ...
      dog/ 001.png ...

    train = ImageFolder("photos", "fit")      # train minus a fixed, seeded validation holdout
    val = ImageFolder("photos", "val")
    x, y = train[0]                            # (C, H, W) float32 normalised, int label

Or timm's layout, whose splits are then used as given (no holdout):

    photos/
      train/ cat/ ... dog/ ...
      val/ cat/ ... dog/ ...          (or validation/)
      test/ cat/ ... dog/ ...         (optional)

    ImageFolder("photos", "fit")      # = "train": every image of train/
    ImageFolder("photos", "test")     # test/, when there is one

A root with a ``train/`` and a ``val/`` (or ``validation/``) folder is read this way; every split
must hold the same classes (one line naming the folder and the class otherwise).

Classes are the sub-folder names, sorted; files are PNG, JPEG, BMP, GIF, WebP or TIFF (by
extension, case-insensitive; hidden files are skipped). Every image is brought to one size and
one channel count: by default those of the first image (sorted by class, then file name);
grayscale when every image is grayscale, else RGB. An image of another size is resized as
``tfam predict`` resizes (box filter when shrinking, bilinear when enlarging).

The folder is scanned once per process (cached by its path and the files' sizes and times):
every file's header is read and checked (``PIL.Image.verify``), so an unreadable file is named
before training starts, and the per-channel mean and std of ``pixel / 255`` are computed over
the "train" split (all images, or a fixed sample of 2,048 for larger folders). A folder has
the splits "train" (all images), "fit" and "val" (a class-stratified ``val_fraction`` holdout of
train, seeded by ``seed``); it has no test split. In timm's layout "train" and "fit" are
``train/``, "val" is ``val/`` and "test" is ``test/`` (``FolderIndex.splits`` names them).
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from tfam.data.sources.images import check_split, holdout_split
from tfam.data.vision.imageio import open_image, resize_image, to_mode

__all__ = [
    "FOLDER_SPLITS",
    "IMAGE_EXTENSIONS",
    "FolderIndex",
    "ImageFolder",
    "layout_dirs",
    "scan_folder",
]

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
FOLDER_SPLITS = ("train", "fit", "val")
# timm's folder names per split (the first found is used).
LAYOUT_DIRS = {"train": ("train",), "val": ("val", "validation"), "test": ("test",)}
FOLDER_VAL_FRACTION = 0.2
STATS_SAMPLE = 2048
# A folder whose decoded pixels fit in this many bytes is decoded once and kept in memory, and
# its splits get the in-memory fast path ``get_batch``: a small folder trained for hundreds of
# epochs then decodes each file once, not once an epoch (and starts no loader workers).
IN_MEMORY_BYTES = 256 * 2**20


@dataclass(frozen=True)
class FolderIndex:
    """What a scan of an image folder found: files and labels in a fixed order, the class
    names, the common image size (height, width), channels, and train statistics."""

    root: Path
    files: tuple[Path, ...]
    labels: Tensor
    classes: tuple[str, ...]
    image_size: tuple[int, int]
    in_channels: int
    mean: Tensor
    std: Tensor
    # timm's layout: (split, start, stop) of each split's files in ``files``; () = one folder.
    split_ranges: tuple[tuple[str, int, int], ...] = ()

    @property
    def splits(self) -> tuple[str, ...]:
        """The split names ``ImageFolder`` accepts for this folder."""
        if not self.split_ranges:
            return FOLDER_SPLITS
        return ("train", "fit", *(name for name, _, _ in self.split_ranges if name != "train"))

    def split_range(self, split: str) -> range:
        """The indices into ``files`` of a split given by the layout ("fit" is "train")."""
        split = "train" if split == "fit" else split
        for name, start, stop in self.split_ranges:
            if name == split:
                return range(start, stop)
        return range(len(self.files))


def _image_files(root: Path, min_classes: int = 2) -> tuple[list[Path], list[int], tuple[str, ...]]:
    if not root.is_dir():
        raise FileNotFoundError(f"image folder {str(root)!r} not found")
    class_dirs = sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    files: list[Path] = []
    labels: list[int] = []
    classes = []
    for d in class_dirs:
        found = sorted(
            f
            for f in d.rglob("*")
            if f.is_file() and not f.name.startswith(".") and f.suffix.lower() in IMAGE_EXTENSIONS
        )
        if not found:
            continue
        labels += [len(classes)] * len(found)
        classes.append(d.name)
        files += found
    if len(classes) < min_classes:
        raise ValueError(
            f"image folder {str(root)!r} is invalid: expected one sub-folder per class with "
            f"image files ({', '.join(IMAGE_EXTENSIONS)}), at least two classes; found "
            f"{len(classes)} class folder(s) with images"
        )
    return files, labels, tuple(classes)


def layout_dirs(root: Path) -> dict[str, Path] | None:
    """timm's layout: {"train": root/train, "val": root/val or root/validation, "test":
    root/test when present}; None when ``root`` is one folder of class sub-folders."""
    found = {}
    for split, names in LAYOUT_DIRS.items():
        for name in names:
            if (root / name).is_dir():
                found[split] = root / name
                break
    return found if "train" in found and "val" in found else None


def _layout_files(root: Path) -> tuple[list[Path], list[int], tuple[str, ...], tuple]:
    """Files, labels, classes and split ranges of either layout (see the module docstring)."""
    dirs = layout_dirs(root) if root.is_dir() else None
    if dirs is None:
        files, labels, classes = _image_files(root)
        return files, labels, classes, ()
    files, labels, classes = _image_files(dirs["train"])
    ranges = [("train", 0, len(files))]
    for split in ("val", "test"):
        if split not in dirs:
            continue
        # Fewer classes here is named below as the class it lacks.
        more, more_labels, theirs = _image_files(dirs[split], min_classes=0)
        missing = [c for c in classes if c not in theirs]
        extra = [c for c in theirs if c not in classes]
        if missing or extra:
            what = (
                f"{dirs[split].name}/ has no images of class {missing[0]!r}"
                if missing
                else f"{dirs[split].name}/ has class {extra[0]!r}, which train/ lacks"
            )
            raise ValueError(
                f"image folder {str(root)!r} is invalid: {what}; every split needs the same "
                f"classes ({', '.join(classes)})"
            )
        ranges.append((split, len(files), len(files) + len(more)))
        files += more
        labels += [classes.index(theirs[i]) for i in more_labels]
    return files, labels, classes, tuple(ranges)


def _check_file(path: Path) -> tuple[tuple[int, int], str]:
    """(height, width) and mode of an image file, after checking its data; ValueError naming
    the file when Pillow cannot read it."""
    im = open_image(path, verify=True)
    return (im.height, im.width), im.mode


def _decode(path: Path, channels: int, size: tuple[int, int]) -> np.ndarray:
    """(H, W, C) uint8 pixels of one file, converted and resized."""
    im = to_mode(open_image(path), channels)
    im = resize_image(im, size)
    return np.array(im, dtype=np.uint8).reshape(size[0], size[1], channels)


@functools.cache
def _scan(
    root: str,
    stamp: tuple[tuple[str, int, int], ...],
    image_size: tuple[int, int] | None,
    in_channels: int | None,
) -> FolderIndex:
    path = Path(root)
    files, labels, classes, ranges = _layout_files(path)
    sizes, modes = zip(*(_check_file(f) for f in files))
    size = image_size or sizes[0]
    grey = {"1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "F"}
    channels = in_channels or (1 if all(m in grey for m in modes) else 3)
    n = ranges[0][2] if ranges else len(files)  # statistics of the train split (files first)
    sample = range(n) if n <= STATS_SAMPLE else torch.randperm(n, generator=torch.Generator().manual_seed(0))[:STATS_SAMPLE].tolist()  # fmt: skip
    stack = np.stack([_decode(files[i], channels, size) for i in sample])  # (S, H, W, C)
    from tfam.data.sources.images import compute_mean_std

    mean, std = compute_mean_std(torch.from_numpy(stack).permute(0, 3, 1, 2), 255)
    return FolderIndex(
        root=path,
        files=tuple(files),
        labels=torch.tensor(labels, dtype=torch.int64),
        classes=classes,
        image_size=(int(size[0]), int(size[1])),
        in_channels=channels,
        mean=mean,
        std=std,
        split_ranges=ranges,
    )


def scan_folder(
    root: str | os.PathLike,
    image_size: int | Sequence[int] | None = None,
    in_channels: int | None = None,
) -> FolderIndex:
    """Scan (or reuse the scan of) an image folder; see the module docstring."""
    path = Path(root).expanduser().resolve()
    if isinstance(image_size, int):
        image_size = (image_size, image_size)
    if in_channels not in (None, 1, 3):
        raise ValueError(f"in_channels={in_channels!r} is invalid: expected 1 or 3")
    files = _layout_files(path)[0]
    stamp = tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    size = tuple(int(v) for v in image_size) if image_size is not None else None
    return _scan(str(path), stamp, size, in_channels)


class ImageFolder(torch.utils.data.Dataset):
    """One split of an image folder (see the module docstring), decoded per item, so it suits
    ``torch.utils.data.DataLoader`` with workers.

    ``ds[i]`` -> (image (C, H, W) float32 normalised as ``(pixel / 255 - mean) / std``, label
    int). The facts a model and ``preprocess.json`` need: ``classes``, ``mean``, ``std``,
    ``image_size``, ``in_channels``, ``pixel_scale`` (255) and ``name`` (the folder's path).
    mean, std: None takes the folder's train statistics; pass a trained model's to evaluate it.
    """

    pixel_scale = 255.0

    def __init__(
        self,
        root: str | os.PathLike,
        split: str = "train",
        *,
        seed: int = 0,
        val_fraction: float = FOLDER_VAL_FRACTION,
        image_size: int | Sequence[int] | None = None,
        in_channels: int | None = None,
        mean: Sequence[float] | Tensor | None = None,
        std: Sequence[float] | Tensor | None = None,
    ) -> None:
        index = scan_folder(root, image_size, in_channels)
        check_split(split, index.splits)
        self.index = index
        self.root = index.root
        self.split = split
        self.name = str(index.root)
        self.classes = index.classes
        self.in_channels = index.in_channels
        self.seed = seed
        self.val_fraction = val_fraction
        if index.split_ranges:  # timm's layout: the splits as given
            span = index.split_range(split)
            self.indices = torch.arange(span.start, span.stop)
        elif split == "train":
            self.indices = torch.arange(len(index.files))
        else:
            keep, holdout = holdout_split(index.labels, val_fraction, seed)
            self.indices = keep if split == "fit" else holdout
        self.labels = index.labels.index_select(0, self.indices)
        self.mean = torch.as_tensor(index.mean if mean is None else mean, dtype=torch.float32)
        self.std = torch.as_tensor(index.std if std is None else std, dtype=torch.float32)
        self.mean = self.mean.reshape(-1).expand(self.in_channels).clone()
        self.std = self.std.reshape(-1).expand(self.in_channels).clone()
        if not bool((self.std > 0).all()):
            raise ValueError(f"std={self.std.tolist()} is invalid: every value must be > 0")
        h, w = index.image_size
        if len(index.files) * self.in_channels * h * w <= IN_MEMORY_BYTES:
            # An instance attribute, so ``hasattr(ds, "get_batch")`` says whether it is there.
            self.get_batch = self._get_batch

    @property
    def image_size(self) -> int | tuple[int, int]:
        """int for square images, else (height, width) — as model configs take it."""
        h, w = self.index.image_size
        return h if h == w else (h, w)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def black(self) -> Tensor:
        """(C,) value a black pixel takes after normalisation: (0 - mean) / std."""
        return -self.mean / self.std

    def __len__(self) -> int:
        return int(self.indices.numel())

    def file(self, i: int) -> Path:
        """The file of item ``i``."""
        return self.index.files[int(self.indices[i])]

    def stored(self, i: int) -> Tensor:
        """Item ``i`` as stored: (C, H, W) uint8, converted and resized."""
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for {n} images")
        pixels = _decode(self.file(i % n), self.in_channels, self.index.image_size)
        return torch.from_numpy(pixels).permute(2, 0, 1).contiguous()

    def __getitem__(self, i: int) -> tuple[Tensor, int]:
        x = self.stored(i).to(torch.float32).div_(self.pixel_scale)
        x = (x - self.mean.view(-1, 1, 1)) / self.std.view(-1, 1, 1)
        return x, int(self.labels[i])

    def _get_batch(self, indices: Sequence[int] | Tensor) -> tuple[Tensor, Tensor]:
        """(images (B, C, H, W) float32 normalised, labels (B,) int64) of items ``indices``,
        from the folder's pixels decoded once (the same values as ``ds[i]``)."""
        idx = torch.as_tensor(indices, dtype=torch.int64).reshape(-1)
        pixels = _all_pixels(self.index).index_select(0, self.indices.index_select(0, idx))
        x = pixels.to(torch.float32).div_(self.pixel_scale)
        x = (x - self.mean.view(1, -1, 1, 1)) / self.std.view(1, -1, 1, 1)
        return x, self.labels.index_select(0, idx)

    def pixels(self) -> Tensor:
        """Every item as stored, (N, C, H, W) uint8 (the folder decoded once, then kept)."""
        return _all_pixels(self.index).index_select(0, self.indices)

    def with_stats(
        self, mean: Sequence[float] | Tensor, std: Sequence[float] | Tensor
    ) -> ImageFolder:
        """The same split, normalised with other statistics (a trained model's)."""
        other = self._copy()
        other.mean = (
            torch.as_tensor(mean, dtype=torch.float32).reshape(-1).expand(self.in_channels).clone()
        )
        other.std = (
            torch.as_tensor(std, dtype=torch.float32).reshape(-1).expand(self.in_channels).clone()
        )
        return other

    def _copy(self) -> ImageFolder:
        """A shallow copy whose in-memory ``get_batch`` reads the copy, not this split."""
        other = copy.copy(self)
        if "get_batch" in self.__dict__:
            other.get_batch = other._get_batch
        return other

    def subset(self, index: Tensor) -> ImageFolder:
        """Items ``index`` (n,) of this split, with its statistics."""
        index = torch.as_tensor(index, dtype=torch.int64)
        other = self._copy()
        other.indices = self.indices.index_select(0, index)
        other.labels = self.labels.index_select(0, index)
        return other

    def class_counts(self) -> Tensor:
        """(num_classes,) number of images per class."""
        return torch.bincount(self.labels, minlength=self.num_classes)

    def __repr__(self) -> str:
        h, w = self.index.image_size
        return (
            f"ImageFolder(root={self.name!r}, split={self.split!r}, n={len(self)}, images="
            f"({self.in_channels}, {h}, {w}), classes={self.num_classes})"
        )


@functools.cache
def _all_pixels(index: FolderIndex) -> Tensor:
    """(N, C, H, W) uint8 pixels of every file of a scanned folder, in ``index.files`` order."""
    c, (h, w) = index.in_channels, index.image_size
    stack = np.stack([_decode(f, c, (h, w)) for f in index.files])  # (N, H, W, C)
    return torch.from_numpy(stack).permute(0, 3, 1, 2).contiguous()


def clear_folder_cache() -> None:
    """Forget every folder scanned (and decoded) in this process."""
    _scan.cache_clear()
    _all_pixels.cache_clear()
