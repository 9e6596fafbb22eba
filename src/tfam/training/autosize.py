"""A model and a schedule sized from the user's own data, with the reasons said in one line.

A catalog data set (digits, kjv-rv, ...) trains with its tuned recipe; the user's own data (an
image folder, their text files: a catalog entry with ``is_folder=True``) has none, and a
family's defaults are made for another scale (ViT-B/16 is 86 M parameters for 224x224 images
and a million examples). When such data comes with no ``--preset`` and no ``--init``,
:func:`size_from_data` chooses instead:

- images (ViT): the patch from the image size: the finest patch that gives 4 to 8 patches per
  side (16 to 64 tokens: enough positions to say where things are, few enough that attention
  is cheap and every token sees many examples); a side with no such divisor (37, 99) is
  resized to 8 patches of ``round(side / 8)`` pixels, and sides over 256 to 256. The width
  from the patch (2x the pixels of a patch, so the projection keeps what it sees) capped by
  the examples, the depth from the examples; heads of width 32; an MLP of 2 D, mean pooling,
  2-D sine-cosine positions (nothing to learn from few examples: the Fashion-MNIST preset's
  measured choices); drop path 0.1 below 20,000 examples (ViTs overfit small data).
- text (BERT, GPT, the encoder-decoder): depth and width from the training tokens (examples x
  ``max_length``), heads of width 64, ``max_positions`` the next power of two >= the longest
  example (at least 32).
- the schedule (:func:`plan_schedule`): the batch a power of two near 1/8 of the training
  split (16 to 128 for images, 64 for text) and never larger than the split; epochs for
  about 1,000 optimiser steps (at least 200, at least 10 epochs, at most 300 epochs); warmup 5%
  of the steps; AdamW lr 1e-3 for widths up to 128, scaled by sqrt(128 / D) above (5e-4 for
  text), label smoothing 0.1 for classifiers, gradient clipping at 1; one CPU thread for
  widths up to 128 (see ``Sizing.threads``).

Values the user gives (``--set``, ``--epochs``, ``--batch-size``, ...) always win; the fields
that follow from them (heads and MLP from a given width, warmup from given epochs) follow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Sizing",
    "plan_schedule",
    "size_entry",
    "size_from_data",
    "size_text",
    "size_vit",
    "vit_patch",
]

MIN_STEPS = 200  # fewer optimiser steps than this rarely leave warmup's neighbourhood
TARGET_STEPS = 1000
MIN_EPOCHS = 10
MAX_EPOCHS = 300
GRID = (8, 7, 6, 5, 4)  # patches per side, preferred first
MAX_SIDE = 256
WIDTHS = (64, 96, 128, 192, 256, 384)
IMAGE_TASKS = ("image-classification",)
CLASSIFIER_TASKS = ("image-classification", "sequence-classification", "token-classification")


@dataclass(frozen=True)
class Sizing:
    """What the data chose: config fields for ``create_model`` (on top of the family's
    defaults), :class:`tfam.training.TrainConfig` values, the image size to resize to (None:
    as they are) and the reasons, one clause each."""

    model: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    image_size: int | tuple[int, int] | None = None
    reasons: tuple[str, ...] = ()
    # CPU threads (None: torch's choice). 1 for widths up to 128: matmuls this small gain
    # ~1.4x from a second thread on an idle 2-core machine, and ran tens of times slower with
    # 2 threads while other jobs held the cores (a 140-image folder, width 96: 3 against 200
    # images/s); the digits recipe found the same.
    threads: int | None = None

    @property
    def line(self) -> str:
        """The header's line: ``sized from the data: 40x40 images -> patch 5 (8x8 ...); ...``."""
        return "sized from the data: " + "; ".join(self.reasons)


def _pow2_floor(x: float) -> int:
    return 1 << max(0, int(math.floor(math.log2(max(x, 1.0)))))


def _pair(value: Any) -> tuple[int, int]:
    if isinstance(value, (list, tuple)):
        return int(value[0]), int(value[1])
    return int(value), int(value)


def vit_patch(side: int) -> tuple[int, int]:
    """(side after resizing, patch) for one image side: the finest patch giving 4 to 8
    patches per side; sides below 4 get patch 1; a side with no such divisor becomes
    ``8 * round(side / 8)``, a side over 256 becomes 256 (patch 32)."""
    if side < 1:
        raise ValueError(f"image side {side!r} is invalid: expected an int >= 1")
    if side > MAX_SIDE:
        return MAX_SIDE, MAX_SIDE // GRID[0]
    if side <= GRID[0]:
        return side, 1
    for grid in GRID:
        if side % grid == 0:
            return side, side // grid
    patch = max(1, round(side / GRID[0]))
    return GRID[0] * patch, patch


def _examples_scale(n: int) -> tuple[int, int]:
    """(depth, width cap) for ``n`` training examples: small data, small model."""
    if n < 1_000:
        return 4, 96
    if n < 5_000:
        return 6, 128
    if n < 20_000:
        return 6, 192
    return 8, 256


def size_vit(
    image_size: int | tuple[int, int],
    in_channels: int,
    train_size: int,
    overrides: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], int | tuple[int, int] | None, list[str]]:
    """ViT fields, the size to resize images to (None: none) and the reasons, for images of
    ``image_size`` (H, W) with ``in_channels`` channels and ``train_size`` training examples.
    ``overrides`` (the user's ``--set``): given fields are kept and what follows from them
    (heads, MLP width from ``dim``) is derived from them."""
    given = dict(overrides or {})
    h, w = _pair(image_size)
    reasons = []
    model: dict[str, Any] = {}
    resize: tuple[int, int] | None = None
    if "patch_size" in given:
        ph, pw = _pair(given["patch_size"])
    else:
        (h2, ph), (w2, pw) = vit_patch(h), vit_patch(w)
        model["patch_size"] = ph if ph == pw else (ph, pw)
        if (h2, w2) != (h, w):
            resize = (h2, w2)
        shown = f"{h}x{w} images" + (f" resized to {h2}x{w2}" if resize else "")
        patch = f"{ph}" if ph == pw else f"{ph}x{pw}"
        reasons.append(f"{shown} -> patch {patch} ({h2 // ph}x{w2 // pw} patches)")
    depth, cap = _examples_scale(train_size)
    patch_pixels = ph * pw * in_channels
    by_patch = next((x for x in WIDTHS if x >= 2 * patch_pixels), WIDTHS[-1])
    width = int(given.get("dim", min(cap, by_patch)))
    depth = int(given.get("depth", depth))
    model.update(
        dim=width,
        depth=depth,
        heads=_heads(width, 32),
        ffn_dim=2 * width,
        pool="mean",
        position="sincos2d",
        init_std=0.05,
        drop_path=0.1 if train_size < 20_000 else 0.05,
        attention="auto",
    )
    reasons.append(
        f"{train_size:,} examples -> {depth} blocks of width {width}"
        + (f" (a patch holds {patch_pixels} values)" if width == by_patch < cap else "")
        + f", drop path {model['drop_path']:g}"
    )
    return (
        model,
        (None if resize is None else (resize[0] if resize[0] == resize[1] else resize)),
        reasons,
    )


def _heads(width: int, head_width: int) -> int:
    """The most heads of about ``head_width`` that divide ``width``."""
    for heads in range(max(1, width // head_width), 0, -1):
        if width % heads == 0:
            return heads
    return 1


def size_text(
    family: str,
    train_size: int,
    max_length: int | None,
    train_tokens: int | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """BERT / GPT / encoder-decoder fields and the reasons, for ``train_size`` examples of at
    most ``max_length`` tokens (``train_tokens``: their total, when known; else the product).
    ``overrides`` as in :func:`size_vit`."""
    given = dict(overrides or {})
    length = int(max_length) if max_length else 128
    tokens = int(train_tokens) if train_tokens else train_size * length
    if tokens < 200_000:
        depth, width = 2, 128
    elif tokens < 2_000_000:
        depth, width = 4, 192
    elif tokens < 20_000_000:
        depth, width = 6, 256
    else:
        depth, width = 6, 384
    width = int(given.get("dim", width))
    depth = int(given.get("depth", depth))
    positions = max(32, 1 << (max(1, length) - 1).bit_length())
    model: dict[str, Any] = {
        "dim": width,
        "depth": depth,
        "heads": _heads(width, 64),
        "ffn_dim": 4 * width,
        "max_positions": int(given.get("max_positions", positions)),
        "dropout": 0.1,
    }
    if family == "transformer":
        model["decoder_depth"] = depth
    reasons = [
        f"{train_size:,} examples, ~{tokens:,} tokens -> {depth} blocks of width {width}, "
        f"{model['heads']} heads",
        f"examples up to {length} tokens -> {model['max_positions']} positions",
    ]
    return model, reasons


def plan_schedule(
    train_size: int,
    *,
    width: int,
    text: bool = False,
    classifier: bool = True,
    batch_size: int | None = None,
    epochs: int | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """TrainConfig values and the reasons for ``train_size`` training examples and a model of
    ``width``: batch <= the split, about 1,000 steps (>= 200), warmup 5% of them. A given
    ``batch_size`` or ``epochs`` is kept (and not returned); the rest follows from it."""
    if train_size < 1:
        raise ValueError(f"train_size={train_size!r} is invalid: expected an int >= 1")
    values: dict[str, Any] = {}
    if batch_size is None:
        top = 64 if text else 128
        batch = min(train_size, max(16, min(top, _pow2_floor(train_size / 8))))
        values["batch_size"] = batch
    else:
        batch = int(batch_size)
    steps_per_epoch = math.ceil(train_size / batch)
    if epochs is None:
        wanted = max(MIN_STEPS, TARGET_STEPS)
        n_epochs = min(MAX_EPOCHS, max(MIN_EPOCHS, math.ceil(wanted / steps_per_epoch)))
        n_epochs = max(n_epochs, math.ceil(MIN_STEPS / steps_per_epoch))
        values["epochs"] = n_epochs
    else:
        n_epochs = int(epochs)
    steps = n_epochs * steps_per_epoch
    lr = 5e-4 if text else 1e-3 * min(1.0, math.sqrt(128 / width))
    values.update(
        lr=float(f"{lr:.2g}"),
        min_lr=1e-5,
        weight_decay=0.05,
        warmup_epochs=round(0.05 * n_epochs, 3),
        clip_grad=1.0,
    )
    if classifier:
        values["label_smoothing"] = 0.1
    reasons = [
        f"batch {batch}, {n_epochs} epochs = {steps:,} steps (warmup 5%), lr {values['lr']:g}"
    ]
    return values, reasons


def size_from_data(
    family: str,
    task: str,
    info: Any,
    train_size: int,
    overrides: Mapping[str, Any] | None = None,
    given_train: Mapping[str, Any] | None = None,
) -> Sizing:
    """The sizing of ``family`` trained for ``task`` on data described by ``info`` (a
    ``DatasetInfo`` with ``image_size``/``in_channels``, or a ``TextDatasetInfo`` with
    ``max_length``), ``train_size`` examples in the split trained on. ``overrides``: the
    user's ``--set`` values; ``given_train``: TrainConfig values the user gave (their
    ``batch_size`` and ``epochs`` shape the rest of the schedule)."""
    given_train = dict(given_train or {})
    image_size = getattr(info, "image_size", None)
    resize = None
    if image_size is not None:
        model, resize, reasons = size_vit(image_size, int(info.in_channels), train_size, overrides)
    else:
        model, reasons = size_text(
            family,
            train_size,
            getattr(info, "max_length", None),
            getattr(info, "train_tokens", None),
            overrides,
        )
    train, more = plan_schedule(
        train_size,
        width=int(model["dim"]),
        text=image_size is None,
        classifier=task in CLASSIFIER_TASKS,
        batch_size=given_train.get("batch_size"),
        epochs=given_train.get("epochs"),
    )
    threads = 1 if int(model["dim"]) <= 128 else None
    return Sizing(
        model=model, train=train, image_size=resize, reasons=(*reasons, *more), threads=threads
    )


def size_entry(
    family: str,
    task: str,
    entry: Any,
    *,
    preset: str | None = None,
    init: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    given_train: Mapping[str, Any] | None = None,
) -> tuple[Any, Sizing | None]:
    """(entry, sizing) for ``tfam train``: the user's own data (``entry.is_folder``) with no
    ``preset`` and no ``init`` is sized by :func:`size_from_data` (an image folder whose images
    need another size is re-read at that size: the returned entry); anything else is returned
    as it is, with None (catalog data sets keep their recipes)."""
    if not getattr(entry, "is_folder", False) or preset is not None or init is not None:
        return entry, None
    train_size = len(entry.load(entry.train_split))
    sizing = size_from_data(family, task, entry.info, train_size, overrides, given_train)
    if sizing.image_size is not None:
        from tfam.data.catalog import folder_entry

        entry = folder_entry(entry.name, image_size=sizing.image_size)
    return entry, sizing
