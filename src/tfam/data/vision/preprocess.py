"""Turn an image file (or a dataset sample) into the tensor a trained model needs.

A run directory written by ``tfam train`` holds ``preprocess.json``::

    {"dataset": "digits", "image_size": [8, 8], "in_channels": 1,
     "mean": [0.305], "std": [0.376], "classes": ["0", ..., "9"], "pixel_scale": 16.0}

The model was trained on ``x = (pixel / pixel_scale - mean) / std`` per channel, where ``pixel``
is the dataset's stored integer value (0..16 for digits, 0..255 for Fashion-MNIST). An 8-bit
image file is brought to the same form:

1. Read with Pillow (EXIF orientation applied). Transparent pixels are composited over white,
   as image viewers show them.
2. Converted to grayscale (``in_channels == 1``) or RGB (``in_channels == 3``).
3. **Inversion rule (digits-like data).** The dataset is *digits-like* when it has one channel
   and its mean intensity ``mean[0] < 0.5``: light strokes on a dark background, as in
   scikit-learn's digits and Fashion-MNIST. For such data, an image whose *border is bright* —
   the median of the outer ring of pixels (``max(1, min(H, W) // 16)`` pixels wide, measured at
   full resolution) is above 127.5 — is taken to be dark-on-light (ink on paper, a drawing app's
   white canvas) and inverted, ``p -> 255 - p``. ``invert=True/False`` forces the choice.
4. Resized to ``image_size`` (box filter, an area average, when shrinking — which is how
   scikit-learn's 8x8 digits were made from 32x32 bitmaps; bilinear when enlarging).
5. **Contrast stretch (digits-like data).** The resized image is stretched so that its darkest
   pixel is 0 and its brightest is full intensity: every digits training image spans 0..16
   (98% reach 16 exactly), whereas a thin pen stroke shrunk to 8x8 only reaches a fraction of
   that. ``stretch=False`` turns this off.
6. Scaled to the dataset's integer levels, ``round(p / 255 * pixel_scale)``, then normalised
   with ``mean`` and ``std`` like the training data.

``"test:17"`` (``SPLIT:INDEX``) names a sample of the run's dataset instead of a file.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor

from tfam.data.vision.imageio import open_image, resize_image, to_mode

PREPROCESS_NAME = "preprocess.json"
SAMPLE_SPEC = re.compile(r"^(train|fit|val|test):(\d+)$")

Invert = bool | Literal["auto"]

__all__ = [
    "PREPROCESS_NAME",
    "ModelInput",
    "Preprocess",
    "border_is_bright",
    "load_image",
    "load_input",
    "load_preprocess",
    "load_sample",
    "open_image",
    "resize_image",
    "to_mode",
]


@dataclass(frozen=True)
class Preprocess:
    """What a model expects of its input: size, channels, normalisation, class names.

    ``image_size`` is (height, width); ``mean`` and ``std`` have one value per channel and apply to
    ``pixel / pixel_scale``.
    """

    image_size: tuple[int, int]
    in_channels: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    classes: tuple[str, ...]
    pixel_scale: float
    dataset: str | None = None

    def __post_init__(self) -> None:
        size = self.image_size
        if (
            not isinstance(size, Sequence)
            or len(size) != 2
            or not all(isinstance(v, int) and v > 0 for v in size)
        ):
            raise ValueError(
                f"image_size={size!r} is invalid: expected [height, width], positive ints"
            )
        if self.in_channels not in (1, 3):
            raise ValueError(
                f"in_channels={self.in_channels!r} is invalid: expected 1 (grayscale) or 3 (RGB)"
            )
        for name in ("mean", "std"):
            values = getattr(self, name)
            if len(values) != self.in_channels:
                raise ValueError(
                    f"{name}={list(values)!r} is invalid: expected {self.in_channels} value(s), "
                    "one per channel"
                )
        if not _finite(self.mean) or not _finite(self.std):
            raise ValueError(
                f"mean={list(self.mean)!r}, std={list(self.std)!r} are invalid: expected finite numbers"
            )
        if not all(s > 0 for s in self.std):
            raise ValueError(f"std={list(self.std)!r} is invalid: every value must be > 0")
        if not self.classes:
            raise ValueError("classes=[] is invalid: expected one name per class")
        if not self.pixel_scale > 0:
            raise ValueError(f"pixel_scale={self.pixel_scale!r} is invalid: expected a number > 0")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Preprocess:
        required = ("image_size", "in_channels", "mean", "std", "classes", "pixel_scale")
        missing = [k for k in required if k not in d]
        if missing:
            raise ValueError(
                f"preprocess settings lack {', '.join(missing)}; expected keys: "
                f"{', '.join(('dataset', *required))}"
            )
        size = d["image_size"]
        if isinstance(size, int):
            size = (size, size)
        return cls(
            image_size=tuple(size),
            in_channels=d["in_channels"],
            mean=tuple(float(v) for v in d["mean"]),
            std=tuple(float(v) for v in d["std"]),
            classes=tuple(str(c) for c in d["classes"]),
            pixel_scale=float(d["pixel_scale"]),
            dataset=d.get("dataset"),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "image_size": list(self.image_size),
            "in_channels": self.in_channels,
            "mean": list(self.mean),
            "std": list(self.std),
            "classes": list(self.classes),
            "pixel_scale": self.pixel_scale,
        }

    @property
    def digits_like(self) -> bool:
        """One channel, light content on a dark background (mean intensity below one half)."""
        return self.in_channels == 1 and self.mean[0] < 0.5

    def normalize(self, pixels: Tensor) -> Tensor:
        """Stored pixel values (..., C, H, W) (0..pixel_scale) -> float32 model input."""
        mean = torch.tensor(self.mean, dtype=torch.float32).view(-1, 1, 1)
        std = torch.tensor(self.std, dtype=torch.float32).view(-1, 1, 1)
        return (pixels.to(torch.float32) / self.pixel_scale - mean) / std

    def check_model(self, model: torch.nn.Module) -> None:
        """ValueError when the model's config disagrees with these settings."""
        config = getattr(model, "config", None)
        if config is None:
            return
        expected = {
            "image_size": tuple(self.image_size),
            "in_channels": self.in_channels,
            "num_classes": len(self.classes),
        }
        for name, value in expected.items():
            have = getattr(config, name, None)
            have = tuple(have) if isinstance(have, list | tuple) else have
            if have is not None and have != value:
                raise ValueError(
                    f"preprocess.json says {name}={value!r} but the model's config has "
                    f"{name}={have!r}; they must agree (was the run directory mixed up?)"
                )


def load_preprocess(run_dir: str | Path) -> Preprocess:
    """Read ``run_dir/preprocess.json`` (written by ``tfam train``)."""
    path = Path(run_dir) / PREPROCESS_NAME
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: a run directory written by `tfam train` holds it; it is JSON "
            'like {"dataset": "digits", "image_size": [8, 8], "in_channels": 1, "mean": [...], '
            '"std": [...], "classes": ["0", ...], "pixel_scale": 16.0}'
        )
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from err
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(data).__name__}")
    try:
        return Preprocess.from_dict(data)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from err


@dataclass
class ModelInput:
    """One input ready for the model.

    tensor: (C, H, W) float32, normalised. pixels: (H, W, C) float32 in [0, 1] — what the model
    sees before mean/std, for display. label: the true class for a dataset sample, else None.
    """

    tensor: Tensor
    pixels: np.ndarray
    name: str
    label: int | None = None
    inverted: bool = False
    stretched: bool = False


def border_is_bright(gray: np.ndarray) -> bool:
    """True when the median of the outer ring of a (H, W) 0..255 image is above 127.5.

    The ring is ``max(1, min(H, W) // 16)`` pixels wide; the median ignores strokes that touch
    the edge.
    """
    h, w = gray.shape
    r = max(1, min(h, w) // 16)
    ring = np.concatenate(
        [gray[:r].ravel(), gray[-r:].ravel(), gray[r:-r, :r].ravel(), gray[r:-r, -r:].ravel()]
    )
    return bool(np.median(ring) > 127.5)


def load_image(
    path: str | Path, pre: Preprocess, invert: Invert = "auto", stretch: bool | None = None
) -> ModelInput:
    """Read an image file and prepare it as ``pre`` describes (module docstring: the rules).

    invert: "auto" applies the border rule to digits-like data only; True/False force it.
    stretch: None stretches the contrast of digits-like data; True/False force it.
    """
    from PIL import ImageOps

    if invert not in ("auto", True, False):
        raise ValueError(f"invert={invert!r} is invalid: expected 'auto', True or False")
    path = Path(path)
    im = to_mode(open_image(path), pre.in_channels)
    if invert == "auto":
        gray = np.asarray(im.convert("L"), dtype=np.float64)
        do_invert = pre.digits_like and border_is_bright(gray)
    else:
        do_invert = bool(invert)
    if do_invert:
        im = ImageOps.invert(im)
    h, w = pre.image_size
    im = resize_image(im, (h, w))
    arr = np.asarray(im, dtype=np.float64).reshape(h, w, pre.in_channels)
    do_stretch = pre.digits_like if stretch is None else bool(stretch)
    lo, hi = float(arr.min()), float(arr.max())
    stretched = do_stretch and hi > lo and (lo, hi) != (0.0, 255.0)
    if stretched:
        arr = (arr - lo) * (255.0 / (hi - lo))
    # Quantise to the dataset's stored levels, so the model sees values it was trained on.
    stored = np.rint(arr / 255.0 * pre.pixel_scale)
    pixels = torch.from_numpy(stored).permute(2, 0, 1).float()  # (C, H, W)
    return ModelInput(
        tensor=pre.normalize(pixels),
        pixels=(stored / pre.pixel_scale).astype(np.float32),
        name=str(path),
        inverted=do_invert,
        stretched=stretched,
    )


def load_sample(spec: str, pre: Preprocess, root: str | Path | None = None) -> ModelInput:
    """``"SPLIT:INDEX"`` -> that sample of the run's dataset (``pre.dataset``)."""
    match = SAMPLE_SPEC.match(spec)
    if match is None:
        raise ValueError(f"sample {spec!r} is invalid: expected SPLIT:INDEX, e.g. test:0")
    if not pre.dataset:
        raise ValueError(
            f"cannot resolve {spec!r}: preprocess.json names no dataset; pass an image file"
        )
    from tfam.data.catalog import load_dataset

    split, index = match.group(1), int(match.group(2))
    ds = load_dataset(pre.dataset, split, root=root)
    if index >= len(ds):
        raise ValueError(
            f"sample {spec!r} is invalid: the {pre.dataset} {split} split has {len(ds)} images, "
            f"valid indices 0..{len(ds) - 1}"
        )
    stored = ds.stored(index)  # (C, H, W) uint8, the dataset's own levels
    return ModelInput(
        tensor=pre.normalize(stored),
        pixels=(stored.permute(1, 2, 0).numpy().astype(np.float32) / pre.pixel_scale),
        name=f"{pre.dataset} {split}[{index}]",
        label=int(ds.labels[index]),
    )


def load_input(
    spec: str | Path,
    pre: Preprocess,
    invert: Invert = "auto",
    stretch: bool | None = None,
    root: str | Path | None = None,
) -> ModelInput:
    """An image file, or ``SPLIT:INDEX`` (e.g. ``test:0``) for a sample of the run's dataset
    when no file of that name exists."""
    text = str(spec)
    if SAMPLE_SPEC.match(text) and not Path(text).exists():
        return load_sample(text, pre, root=root)
    return load_image(text, pre, invert=invert, stretch=stretch)


def _finite(values: Sequence[float]) -> bool:
    return all(math.isfinite(v) for v in values)
