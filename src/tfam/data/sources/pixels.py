"""tfam's image datasets read as pixel sequences for iGPT: each image becomes its palette ids
in raster order after a start token, with its label kept (for probes and fine-tuning).

    train = load_pixels("digits", "fit")      # 8x8 digits, 17 grey levels (values 0..16, exact)
    ids, label = train[0]                     # ids (65,) = [start=17] + 64 pixel ids
    test = load_pixels("fashion-mnist", "test")   # 28x28 averaged to 14x14, 16 grey levels

The start token is the last id (``vocab_size - 1 = palette.size``), Hugging Face's ImageGPT
convention. Splits are the image datasets' own (train, fit, val, test; the same seeds). A run
trained on one keeps its palette and image shape in ``palette.json`` (:meth:`PixelDataset.run_files`).

Your own image folder reads the same way (:func:`load_folder_pixels`: its images brought to a
small size, the palette given; ``tfam train igpt --data photos/`` chooses both, see
:mod:`tfam.training.autosize`); its facts are a :class:`PixelInfo`.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from tfam.data.sources.images import DIGITS, FASHION_MNIST, load_digits, load_fashion_mnist
from tfam.data.text.dataset import TextDatasetInfo
from tfam.data.vision.palette import PALETTE_FILE, GreyPalette, Palette

__all__ = [
    "PIXEL_SOURCES",
    "PixelDataset",
    "PixelInfo",
    "downsample",
    "load_folder_pixels",
    "load_pixels",
    "pixels_info",
]


@dataclass(frozen=True)
class PixelInfo(TextDatasetInfo):
    """A pixel dataset's facts (:class:`TextDatasetInfo`: vocabulary = palette + start, the
    classes) and the images': ``image_shape`` (C, H, W) as encoded, ``source_size`` (H, W)
    of the images before they were brought to that size (None: the same), ``palette`` (its
    description: "16 grey levels of 0..255")."""

    image_shape: tuple[int, int, int] = (1, 1, 1)
    source_size: tuple[int, int] | None = None
    palette: str = ""


def downsample(images: Tensor, factor: int) -> Tensor:
    """uint8 images (B, C, H, W) -> (B, C, H/f, W/f): the mean of each f x f block, rounded."""
    if factor == 1:
        return images
    pooled = F.avg_pool2d(images.to(torch.float32), factor)
    return pooled.round().clamp(0, 255).to(torch.uint8)


class PixelDataset(torch.utils.data.Dataset):
    """Labelled images as palette-id sequences: ``ds[i]`` -> (ids (1 + H*W,) int64 =
    [start] + the pixels' ids in raster order, label int).

    ``ids`` (N, 1 + H*W), ``labels`` (N,), ``images`` (N, C, H, W) uint8 (as encoded, for
    drawing), ``palette``, ``image_shape`` (C, H, W), ``start_token_id`` = ``vocab_size - 1``,
    ``classes``. A causal-lm task reads the ids (inputs ids[:-1], labels ids[1:]); a sequence
    classifier the ids and the label. ``pixel_scale``: the images' white (None: the palette's
    ``scale``); images of another white are encoded at the palette's (x * scale / pixel_scale),
    so a palette made for 0..16 reads 0..255 images as the same grey levels."""

    pad_token_id = None  # every sequence has the same length: no padding

    def __init__(
        self,
        images: Tensor,
        labels: Tensor,
        classes: Sequence[str],
        palette: Palette,
        name: str = "custom",
        split: str | None = None,
        pixel_scale: float | None = None,
    ) -> None:
        images = torch.as_tensor(images)
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise ValueError(
                f"images must be a uint8 (N, C, H, W) tensor, got {images.dtype} of shape "
                f"{tuple(images.shape)}"
            )
        self.images = images
        self.labels = torch.as_tensor(labels, dtype=torch.int64)
        self.classes = tuple(classes)
        self.palette = palette
        self.name, self.split = name, split
        self.image_shape = tuple(int(s) for s in images.shape[1:])
        self.start_token_id = palette.size
        self.bos_token_id = palette.size
        self.vocab_size = palette.size + 1
        if pixel_scale is not None and float(pixel_scale) != palette.scale:
            pixels = palette.encode(images.to(torch.float64) * (palette.scale / float(pixel_scale)))
        else:
            pixels = palette.encode(images)
        start = torch.full((len(images), 1), self.start_token_id, dtype=torch.int64)
        self.ids = torch.cat([start, pixels], dim=1)
        self.context = pixels.shape[1]  # H*W: a next-pixel model reads [start] + H*W - 1

    def __len__(self) -> int:
        return self.ids.shape[0]

    def __getitem__(self, i: int) -> tuple[Tensor, int]:
        return self.ids[i], int(self.labels[i])

    def subset(self, index: Tensor) -> PixelDataset:
        """The images ``index`` (n,), with the same palette."""
        index = torch.as_tensor(index, dtype=torch.int64)
        other = copy.copy(self)
        other.images = self.images.index_select(0, index)
        other.labels = self.labels.index_select(0, index)
        other.ids = self.ids.index_select(0, index)
        return other

    def get_batch(self, indices: Tensor) -> list[tuple[Tensor, int]]:
        """The items at ``indices`` (the tasks collate them)."""
        return [(self.ids[i], int(self.labels[i])) for i in indices.tolist()]

    @property
    def black_id(self) -> int:
        """The palette id of a black pixel (what augmentation pads with)."""
        c = self.image_shape[0]
        return int(self.palette.encode(torch.zeros(1, c, 1, 1))[0, 0])

    def augment_ids(self, ids: Tensor, augment: Any, generator: torch.Generator) -> Tensor:
        """Training augmentation on the id grid: ids (B, 1 + H*W) -> the same with each image's
        pixels moved by ``augment`` (a :class:`~tfam.data.vision.augment.BatchAugment`: pad
        with black's id and crop at a random offset, flips), the start token kept. One id per
        pixel, so a colour palette's ids move as whole pixels."""
        _, h, w = self.image_shape
        if getattr(augment, "is_identity", False):
            return ids
        if ids.ndim != 2 or ids.shape[1] != 1 + h * w:
            raise ValueError(
                f"ids has shape {tuple(ids.shape)}; expected (B, {1 + h * w}) = [start] + "
                f"{h}x{w} pixel ids"
            )
        grid = ids[:, 1:].reshape(-1, 1, h, w).to(torch.float32)  # ids < 2**24: exact
        moved = augment(grid, generator, fill=float(self.black_id))
        return torch.cat([ids[:, :1], moved.round().to(ids.dtype).flatten(1)], dim=1)

    def run_files(self) -> dict[str, dict[str, Any]]:
        """The JSON files a run trained on this data keeps beside its model: palette.json
        (the palette, the image shape (C, H, W), the start token and the dataset)."""
        return {
            PALETTE_FILE: {
                **self.palette.to_dict(),
                "image_shape": list(self.image_shape),
                "start_token_id": self.start_token_id,
                "dataset": self.name,
            }
        }

    def __repr__(self) -> str:
        c, h, w = self.image_shape
        return (
            f"PixelDataset({self.name!r}, split={self.split!r}, {len(self)} images of "
            f"{c}x{h}x{w}, {self.palette!r})"
        )


# name -> (the image loader, the downsampling factor, the palette, the image DatasetInfo)
PIXEL_SOURCES: dict[str, tuple[Any, int, Palette, Any]] = {
    "digits": (
        lambda split, root=None, seed=0: load_digits(split, seed=seed),
        1,
        GreyPalette(17, scale=16),
        DIGITS,
    ),
    "fashion-mnist": (
        lambda split, root=None, seed=0: load_fashion_mnist(split, root=root, seed=seed),
        2,
        GreyPalette(16, scale=255),
        FASHION_MNIST,
    ),
}


def load_pixels(
    source: str, split: str = "train", *, root: str | os.PathLike | None = None, seed: int = 0
) -> PixelDataset:
    """A split of an image dataset of :data:`PIXEL_SOURCES` ("digits", "fashion-mnist") as
    palette-id sequences."""
    if source not in PIXEL_SOURCES:
        raise ValueError(
            f"source={source!r} is invalid: expected one of {', '.join(PIXEL_SOURCES)}"
        )
    loader, factor, palette, info = PIXEL_SOURCES[source]
    data = loader(split, root=root, seed=seed)
    images = downsample(data.images, factor)
    return PixelDataset(
        images, data.labels, data.classes, palette, name=f"{source}-pixels", split=split
    )


def load_folder_pixels(
    root: str | os.PathLike,
    split: str = "train",
    *,
    image_size: tuple[int, int],
    palette: Palette,
    in_channels: int | None = None,
    seed: int = 0,
) -> PixelDataset:
    """A split of an image folder (:class:`tfam.data.sources.folder.ImageFolder`: its splits
    and seeds) as palette-id sequences: every image brought to ``image_size`` (H, W) (a box
    filter when shrinking: the mean of the pixels each new pixel covers) and ``in_channels``
    (None: the folder's), then encoded by ``palette`` (its values 0..255 read at the
    palette's scale)."""
    from tfam.data.sources.folder import ImageFolder

    folder = ImageFolder(root, split, seed=seed, image_size=image_size, in_channels=in_channels)
    return PixelDataset(
        folder.pixels(),
        folder.labels,
        folder.classes,
        palette,
        name=folder.name,
        split=split,
        pixel_scale=folder.pixel_scale,
    )


def pixels_info(source: str) -> TextDatasetInfo:
    """The catalog facts of a pixel dataset (loads nothing): vocabulary = palette + start,
    no padding, the start token, the classes (a classifier's ``num_labels``)."""
    _, factor, palette, info = PIXEL_SOURCES[source]
    size = info.image_size if isinstance(info.image_size, int) else info.image_size[0]
    side = size // factor
    return PixelInfo(
        name=f"{source}-pixels",
        vocab_size=palette.size + 1,
        train_size=info.train_size,
        test_size=info.test_size,
        description=(
            f"{info.name} as pixel sequences for iGPT: {side}x{side} images"
            + (f" (the mean of {factor}x{factor} blocks)" if factor > 1 else "")
            + f", {palette.size} grey levels, [start={palette.size}] + {side * side} ids in "
            "raster order; the labels kept (--task classify)"
        ),
        pad_token_id=None,  # type: ignore[arg-type]  (no padding: equal lengths)
        bos_token_id=palette.size,
        eos_token_id=None,  # type: ignore[arg-type]
        classes=info.classes,
        num_labels=len(info.classes),
        head="sequence",
        max_length=1 + side * side,
        image_shape=(info.in_channels, side, side),
        source_size=(size, size) if factor > 1 else None,
        palette=palette.describe(),
    )
