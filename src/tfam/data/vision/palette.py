"""Palettes: images <-> sequences of palette ids, for a GPT over pixels (iGPT, Chen et al.
2020, sec. 3.1: "we cluster (R, G, B) pixel values using k-means with k = 512").

    palette = GreyPalette(levels=17, scale=16)            # the 8x8 digits' values 0..16, exact
    ids = palette.encode(images)                          # uint8 (B, C, H, W) -> (B, H*W) ids
    images = palette.decode(ids, (1, 8, 8))               # -> uint8 (B, C, H, W)
    palette = KMeansPalette.fit(train_images, k=16, seed=0)   # colour: k-means clusters
    palette.save(run_dir / "palette.json"); load_palette(run_dir / "palette.json")

A grey palette has ``levels`` evenly spaced values 0, s/(k-1), ..., s (s = ``scale``, the
images' white) and maps a pixel to the nearest; a k-means palette holds ``k`` colour centres
fitted (seeded) on training pixels and maps a pixel to the nearest centre (squared Euclidean
distance over channels). Ids are in raster order (row by row, left to right); colours are one
id per pixel, not per channel. A palette saves itself as JSON (``to_dict`` / ``palette_from_dict``)
so a run's generation and probes read the images as it was trained on them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from tfam.fileio import atomic_write_bytes

__all__ = [
    "PALETTE_FILE",
    "GreyPalette",
    "KMeansPalette",
    "Palette",
    "load_palette",
    "palette_from_dict",
]

PALETTE_FILE = "palette.json"


def _check_images(images: Tensor, channels: int | None = None) -> Tensor:
    images = torch.as_tensor(images)
    if images.ndim != 4:
        raise ValueError(f"images have shape {tuple(images.shape)}; expected (B, C, H, W)")
    if channels is not None and images.shape[1] != channels:
        raise ValueError(f"images have {images.shape[1]} channels; this palette is for {channels}")
    return images


class Palette:
    """What every palette gives: ``size`` ids, ``channels`` per pixel, ``encode`` (images (B, C,
    H, W) -> ids (B, H*W) int64, raster order), ``decode`` (ids (B, H*W) and the image shape
    (C, H, W) -> uint8 images (B, C, H, W)), ``colours()`` ((size, C) float values of each
    id) and the JSON round trip."""

    kind = ""
    size: int
    channels: int
    scale: float

    def colours(self) -> Tensor:
        raise NotImplementedError

    def describe(self) -> str:
        """What the palette is, in words ("16 grey levels of 0..255", "16 k-means colours")."""
        raise NotImplementedError

    def encode(self, images: Tensor) -> Tensor:
        """images (B, C, H, W) (uint8 or float, in [0, scale]) -> ids (B, H*W): the nearest
        colour of each pixel, row by row."""
        images = _check_images(images, self.channels).to(torch.float32)
        b, c, h, w = images.shape
        pixels = images.permute(0, 2, 3, 1).reshape(-1, c)  # (B*H*W, C), raster order
        distance = torch.cdist(pixels, self.colours().to(torch.float32))  # (B*H*W, size)
        return distance.argmin(dim=1).reshape(b, h * w)

    def decode(self, ids: Tensor, shape: tuple[int, int, int]) -> Tensor:
        """ids (B, H*W) -> uint8 images (B, C, H, W) of shape ``shape`` = (C, H, W) (values
        rounded and clipped to [0, 255])."""
        c, h, w = shape
        ids = torch.as_tensor(ids, dtype=torch.int64)
        if ids.ndim != 2 or ids.shape[1] != h * w:
            raise ValueError(f"ids have shape {tuple(ids.shape)}; expected (B, {h * w})")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.size):
            raise ValueError(
                f"ids lie in [{int(ids.min())}, {int(ids.max())}]; expected [0, {self.size})"
            )
        values = self.colours()[ids]  # (B, H*W, C)
        images = values.reshape(ids.shape[0], h, w, c).permute(0, 3, 1, 2)
        return images.round().clamp(0, 255).to(torch.uint8)

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def save(self, path: str | os.PathLike, **extra: Any) -> Path:
        """Write the palette (and ``extra`` facts, such as the image shape) as JSON, atomically."""
        data = {**self.to_dict(), **extra}
        return atomic_write_bytes(Path(path), (json.dumps(data, indent=1) + "\n").encode())


class GreyPalette(Palette):
    """``levels`` evenly spaced grey values from 0 to ``scale``: id i is i * scale /
    (levels - 1). The digits (values 0..16) with 17 levels are read exactly."""

    kind = "grey"

    def __init__(self, levels: int, scale: float = 255.0) -> None:
        if isinstance(levels, bool) or not isinstance(levels, int) or levels < 2:
            raise ValueError(f"levels={levels!r} is invalid: expected an int >= 2")
        if not scale > 0:
            raise ValueError(f"scale={scale!r} is invalid: expected a number > 0")
        self.size, self.channels, self.scale = levels, 1, float(scale)

    def colours(self) -> Tensor:
        return torch.linspace(0, self.scale, self.size, dtype=torch.float64).unsqueeze(1)

    def encode(self, images: Tensor) -> Tensor:
        """The nearest level, by rounding: id = round(x * (levels - 1) / scale)."""
        images = _check_images(images, 1).to(torch.float64)
        ids = torch.round(images * (self.size - 1) / self.scale).clamp(0, self.size - 1)
        return ids.to(torch.int64).flatten(1)

    def describe(self) -> str:
        return f"{self.size} grey levels of 0..{self.scale:g}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "levels": self.size, "scale": self.scale}

    def __repr__(self) -> str:
        return f"GreyPalette(levels={self.size}, scale={self.scale:g})"


class KMeansPalette(Palette):
    """``k`` colour centres (k, C) in [0, scale]; :meth:`fit` finds them by k-means on training
    pixels (k-means++ seeding, Lloyd iterations, seeded)."""

    kind = "kmeans"

    def __init__(self, centres: Tensor, scale: float = 255.0) -> None:
        centres = torch.as_tensor(centres, dtype=torch.float64)
        if centres.ndim != 2 or centres.shape[0] < 1:
            raise ValueError(f"centres have shape {tuple(centres.shape)}; expected (k, C)")
        self.centres = centres
        self.size, self.channels, self.scale = centres.shape[0], centres.shape[1], float(scale)

    def colours(self) -> Tensor:
        return self.centres

    @classmethod
    def fit(
        cls,
        images: Tensor,
        k: int,
        *,
        seed: int = 0,
        iterations: int = 20,
        sample: int = 100_000,
        scale: float = 255.0,
    ) -> KMeansPalette:
        """k-means over the pixels of ``images`` (B, C, H, W): at most ``sample`` pixels drawn
        (seeded), k-means++ initial centres, then ``iterations`` Lloyd steps (an empty cluster
        keeps its centre). The same images and seed give the same palette."""
        images = _check_images(images)
        pixels = images.permute(0, 2, 3, 1).reshape(-1, images.shape[1]).to(torch.float64)
        if pixels.shape[0] < k:
            raise ValueError(f"k={k} is invalid: the images hold only {pixels.shape[0]} pixels")
        g = torch.Generator().manual_seed(int(seed))
        if pixels.shape[0] > sample:
            pixels = pixels[torch.randperm(pixels.shape[0], generator=g)[:sample]]
        # k-means++ (Arthur & Vassilvitskii 2007): each next centre drawn with probability
        # proportional to its squared distance from the nearest chosen centre.
        centres = pixels[torch.randint(pixels.shape[0], (1,), generator=g)]
        nearest = ((pixels - centres[0]) ** 2).sum(1)
        for _ in range(1, k):
            if float(nearest.sum()) == 0:  # fewer distinct colours than k: repeat one
                choice = torch.randint(pixels.shape[0], (1,), generator=g)
            else:
                choice = torch.multinomial(nearest, 1, generator=g)
            centres = torch.cat([centres, pixels[choice]])
            nearest = torch.minimum(nearest, ((pixels - pixels[choice]) ** 2).sum(1))
        for _ in range(iterations):
            assign = torch.cdist(pixels, centres).argmin(1)
            sums = torch.zeros_like(centres).index_add_(0, assign, pixels)
            counts = torch.bincount(assign, minlength=k).to(pixels.dtype).unsqueeze(1)
            moved = torch.where(counts > 0, sums / counts.clamp_min(1), centres)
            if torch.equal(moved, centres):
                break
            centres = moved
        return cls(centres, scale=scale)

    def describe(self) -> str:
        return f"{self.size} k-means colours"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "centres": self.centres.tolist(), "scale": self.scale}

    def __repr__(self) -> str:
        return f"KMeansPalette(k={self.size}, channels={self.channels})"


def palette_from_dict(data: dict[str, Any]) -> Palette:
    """The palette a ``to_dict`` (a palette.json) describes."""
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind == "grey":
        return GreyPalette(int(data["levels"]), float(data.get("scale", 255.0)))
    if kind == "kmeans":
        return KMeansPalette(torch.tensor(data["centres"]), float(data.get("scale", 255.0)))
    raise ValueError(f"palette kind={kind!r} is invalid: expected 'grey' or 'kmeans'")


def load_palette(path: str | os.PathLike) -> tuple[Palette, dict[str, Any]]:
    """(the palette, the whole JSON object) of a palette.json (a run directory's: the image
    shape and the dataset are beside the palette's own fields)."""
    path = Path(path)
    if path.is_dir():
        path = path / PALETTE_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: an iGPT run keeps its palette there (written by `tfam train "
            "igpt --data digits-pixels`)"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON ({err}); it should hold a palette") from None
    try:
        return palette_from_dict(data), data
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{path}: {err}") from None
