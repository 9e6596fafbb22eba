"""A model and a schedule sized from the user's own data, with the reasons said in one line.

A catalog data set (digits, kjv-rv, ...) trains with its tuned recipe; the user's own data (an
image folder, their text files: a catalog entry with ``is_folder=True``) has none, and a
family's defaults are made for another scale (ViT-B/16 is 86 M parameters for 224x224 images
and a million examples). When such data comes with no ``--preset`` and no ``--init``,
:func:`size_from_data` chooses instead:

Each vision family has its sizer, one function in :data:`SIZERS` (by the config's ``family``;
a config class that subclasses a family's, as a plug-in's ViT, takes that family's sizer):

- ViT: the patch from the image size: the finest patch that gives 4 to 8 patches per
  side (16 to 64 tokens: enough positions to say where things are, few enough that attention
  is cheap and every token sees many examples); a side with no such divisor (37, 99) is
  resized to 8 patches of ``round(side / 8)`` pixels, and sides over 256 to 256. The width
  from the patch (2x the pixels of a patch, so the projection keeps what it sees) capped by
  the examples, the depth from the examples; heads of width 32; an MLP of 2 D, mean pooling,
  2-D sine-cosine positions (nothing to learn from few examples: the Fashion-MNIST preset's
  measured choices); drop path 0.1 below 20,000 examples (ViTs overfit small data).
- DeiT: ViT's sizing, and the distillation token only with a teacher (``--teacher``: the task
  is image-distillation); without one it is ViT's architecture (``distilled=False``).
- CNN (ResNet): the 3x3 stride-1 stem (no pool) for images under 128 pixels a side, Hugging
  Face's 7x7 stride-2 stem + max-pool above (the grid after it is then >= 32, the size the
  small stem meets on CIFAR); stages that halve the grid while it stays >= 2 (at most 4, as
  ResNet); widths doubling from 16 (24, 32, 64 with more examples), one basic block a stage
  below 5,000 examples, two (ResNet-18's) above.
- Swin: the finest patch that leaves a grid of at most 16 a side (a side with none is resized
  as ViT's), the window half the grid's smaller side (at most 8), so the first stage has 2x2
  windows where the image allows; stages while the halved grid still holds a window (at most
  4); C from the examples (32 to 96), heads of width 16 (32 from C = 96, Swin-T's), two blocks
  a stage (a regular and a shifted window), no absolute positions (the relative bias is).
- iGPT (a model that reads images as tokens: its class's ``image_tokens``): the folder is read
  as pixel sequences (:func:`entry_for_family`): images averaged to at most 16 pixels a side
  (256 tokens: causal attention over every pixel stays cheap), a palette of 16 grey levels
  for grey images, else k-means colours fitted on the training pixels (16, 32 or 64 by the
  examples); the GPT's depth and width from the training pixels (2 x 64 below 50,000, the
  iGPT presets' 4 or 6 x 128 up to 50 M), heads of width 32, positions
  for [start] + every pixel (so whole images classify too), no dropout (the iGPT presets').
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "SIZERS",
    "FamilySizing",
    "Sizing",
    "entry_for_family",
    "plan_schedule",
    "sizer_for",
    "size_cnn",
    "size_deit",
    "size_entry",
    "size_from_data",
    "size_igpt",
    "size_swin",
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
CLASSIFIER_TASKS = (
    "image-classification",
    "utterance-classification",
    "image-distillation",
    "sequence-classification",
    "token-classification",
)
CNN_LARGE_STEM = 128  # sides from which the 7x7/2 stem + pool leaves a grid of >= 32
MAX_STAGES = 4
SWIN_MAX_GRID = 16
SWIN_MAX_WINDOW = 8
MAX_PIXEL_SIDE = 16  # iGPT: at most 16 x 16 = 256 pixel tokens
GREY_LEVELS = 16


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


@dataclass(frozen=True)
class FamilySizing:
    """What one family's sizer chose: config fields, the size to bring images to (None: as
    they are), the reasons (one clause each) and ``width``, the model width the schedule's
    learning rate follows."""

    model: dict[str, Any]
    image_size: int | tuple[int, int] | None
    reasons: tuple[str, ...]
    width: int


# sizer(info, train_size, overrides, task) -> FamilySizing; info is the data's DatasetInfo
# (images) or PixelInfo (images as pixel sequences).
Sizer = Callable[[Any, int, Mapping[str, Any], str], FamilySizing]


def _ceil_half(x: int) -> int:
    """ceil(x / 2): a side after a stride-2 step (padded), or patch merging."""
    return (x + 1) // 2


def _square(size: tuple[int, int] | None) -> int | tuple[int, int] | None:
    return None if size is None else (size[0] if size[0] == size[1] else size)


def _vit_sizer(info: Any, train_size: int, given: Mapping[str, Any], task: str) -> FamilySizing:
    model, resize, reasons = size_vit(info.image_size, int(info.in_channels), train_size, given)
    return FamilySizing(model, resize, tuple(reasons), int(model["dim"]))


def size_deit(info: Any, train_size: int, given: Mapping[str, Any], task: str) -> FamilySizing:
    """ViT's sizing; the distillation token and head only when a teacher is given (the task
    is image-distillation): without one they would learn nothing a class head does not."""
    vit = _vit_sizer(info, train_size, given, task)
    model = dict(vit.model)
    reasons = list(vit.reasons)
    if "distilled" not in given:
        model["distilled"] = task == "image-distillation"
        reasons.append(
            "a teacher -> a distillation token and head"
            if model["distilled"]
            else "no --teacher -> no distillation token (ViT's architecture)"
        )
    return FamilySizing(model, vit.image_size, tuple(reasons), vit.width)


def _halvings(grid: int, floor: int, given_stages: int | None = None) -> list[int]:
    """Stage grid sides from ``grid``, each next one ceil(g / 2), while it stays >= ``floor``
    (at most MAX_STAGES stages), or ``given_stages`` of them."""
    grids = [grid]
    while (
        len(grids) < (given_stages or MAX_STAGES)
        and (given_stages is not None or _ceil_half(grids[-1]) >= floor)
    ):  # fmt: skip
        grids.append(_ceil_half(grids[-1]))
    return grids


def size_cnn(info: Any, train_size: int, given: Mapping[str, Any], task: str) -> FamilySizing:
    """A ResNet for ``info``'s images (see the module docstring): stem, stages, widths, blocks."""
    h, w = _pair(info.image_size)
    side = min(h, w)
    model: dict[str, Any] = {}
    stem = str(given.get("stem", "resnet" if side >= CNN_LARGE_STEM else "small"))
    if "stem" not in given:
        model["stem"] = stem
    # The big stem is two stride-2 steps (7x7 conv, 3x3 max-pool), each ceil(side / 2).
    grid = _ceil_half(_ceil_half(side)) if stem == "resnet" else side
    given_stages = next(
        (
            len(given[k])
            for k in ("hidden_sizes", "depths")
            if isinstance(given.get(k), list | tuple)
        ),
        None,
    )
    grids = _halvings(grid, 2, given_stages)
    base = (
        16
        if train_size < 1_000
        else 24
        if train_size < 5_000
        else 32
        if train_size < 20_000
        else 64
    )
    blocks = 1 if train_size < 5_000 else 2
    hidden = tuple(given.get("hidden_sizes") or (base * 2**s for s in range(len(grids))))
    depths = tuple(given.get("depths") or (blocks,) * len(grids))
    if "hidden_sizes" not in given:
        model["hidden_sizes"] = hidden
    if "depths" not in given:
        model["depths"] = depths
    if "embedding_size" not in given:
        model["embedding_size"] = int(hidden[0])
    stem_text = "7x7/2 stem + pool" if stem == "resnet" else "3x3 stem (no pool)"
    reasons = (
        f"{h}x{w} images -> {stem_text}, {len(grids)} stages at "
        + "/".join(str(g) for g in grids)
        + " px",
        f"{train_size:,} examples -> widths "
        + "/".join(str(x) for x in hidden)
        + f", {'/'.join(str(d) for d in depths)} blocks",
    )
    return FamilySizing(model, None, reasons, int(hidden[-1]))


def _swin_patch(side: int) -> tuple[int, int]:
    """(side after resizing, patch) for a Swin: the finest patch leaving <= SWIN_MAX_GRID
    patches a side; a side with none (a prime) becomes ``8 * round(side / 8)``, over 256 256."""
    if side > MAX_SIDE:
        side = MAX_SIDE
    for patch in range(1, side + 1):
        if side % patch == 0 and side // patch <= SWIN_MAX_GRID:
            if side // patch >= min(4, side) or side <= SWIN_MAX_GRID:
                return side, patch
            break
    return _swin_patch(max(8, 8 * round(side / 8)))


def size_swin(info: Any, train_size: int, given: Mapping[str, Any], task: str) -> FamilySizing:
    """A Swin for ``info``'s images (see the module docstring): patch, window, stages, C."""
    h, w = _pair(info.image_size)
    model: dict[str, Any] = {}
    resize = None
    if "patch_size" in given:
        ph, pw = _pair(given["patch_size"])
        h2, w2 = h, w
    else:
        (h2, ph), (w2, pw) = _swin_patch(h), _swin_patch(w)
        model["patch_size"] = ph if ph == pw else (ph, pw)
        resize = (h2, w2) if (h2, w2) != (h, w) else None
    grid = min(h2 // ph, w2 // pw)
    # ceil(G / 2): 2x2 windows in the first stage (padded to whole windows when G is odd).
    window = int(given.get("window", min(SWIN_MAX_WINDOW, max(1, _ceil_half(grid)))))
    if "window" not in given:
        model["window"] = window
    depths = given.get("depths")
    grids = _halvings(
        grid, max(window, 2), len(depths) if isinstance(depths, list | tuple) else None
    )
    if depths is None:
        model["depths"] = (2,) * len(grids)
    dim = int(
        given.get(
            "dim",
            32
            if train_size < 1_000
            else 48
            if train_size < 5_000
            else 64
            if train_size < 20_000
            else 96,
        )
    )
    model.update(dim=dim, heads=int(given.get("heads", _heads(dim, 16 if dim < 96 else 32))))
    model["drop_path"] = given.get("drop_path", 0.1 if train_size < 20_000 else 0.2)
    shown = f"{h}x{w} images" + (f" resized to {h2}x{w2}" if resize else "")
    patch = f"{ph}" if ph == pw else f"{ph}x{pw}"
    windows = (grid + window - 1) // window
    reasons = (
        f"{shown} -> patch {patch} ({h2 // ph}x{w2 // pw} patches), window {window} "
        f"({windows}x{windows} windows), {len(grids)} stages at " + "/".join(str(g) for g in grids),
        f"{train_size:,} examples -> C={dim}, {model['heads']} heads, drop path "
        f"{model['drop_path']:g}",
    )
    return FamilySizing(model, _square(resize), reasons, dim)


def size_igpt(info: Any, train_size: int, given: Mapping[str, Any], task: str) -> FamilySizing:
    """A GPT over pixels for ``info`` (a PixelInfo: the images' shape and palette, chosen by
    :func:`entry_for_family`): depth and width from the training pixels, positions for
    [start] + every pixel."""
    _, h, w = info.image_shape
    pixels = h * w
    tokens = train_size * pixels
    # igpt_digits (92 k training pixels) is 4 x 128, igpt_fashion_mnist (11.8 M) 6 x 128;
    # fewer than 50 k pixels (a folder of ~200 16x16 images) get half igpt_digits.
    if tokens < 50_000:
        depth, width = 2, 64
    elif tokens < 1_000_000:
        depth, width = 4, 128
    elif tokens < 50_000_000:
        depth, width = 6, 128
    else:
        depth, width = 8, 256
    width = int(given.get("dim", width))
    model: dict[str, Any] = {
        "dim": width,
        "depth": int(given.get("depth", depth)),
        "heads": _heads(width, 32),
        "max_positions": int(given.get("max_positions", 1 + pixels)),
        "dropout": 0.0,
        "attn_dropout": 0.0,
    }
    source = info.source_size
    shown = (
        f"{source[0]}x{source[1]} images averaged to {h}x{w} (at most {MAX_PIXEL_SIDE} a side)"
        if source
        else f"{h}x{w} images"
    )
    reasons = (
        f"{shown}, {info.palette} -> [start] + {pixels} ids, {model['max_positions']} positions",
        f"{train_size:,} images, ~{tokens:,} pixels -> {model['depth']} blocks of width "
        f"{width}, {model['heads']} heads",
    )
    return FamilySizing(model, None, reasons, width)


def size_speech(info: Any, train_size: int, given: Mapping[str, Any], task: str) -> FamilySizing:
    """The speech encoder for the user's audio (a SpeechInfo): width and depth from the number
    of utterances (as ViT's from images: a few hundred clips learn with a narrow, shallow
    model), 2x subsampling (20 ms output frames: a spoken word spans 10-40 of them), local
    attention of 16 output frames (320 ms) on each side, 4x subsampling for utterance labels,
    which read the mean of the frames only."""
    width, depth = (64, 2) if train_size < 500 else (96, 3) if train_size < 5_000 else (144, 4)
    width = int(given.get("dim", width))
    depth = int(given.get("depth", depth))
    heads = int(given.get("heads", _heads(width, 32)))
    subsampling = int(given.get("subsampling", 4 if task == "utterance-classification" else 2))
    model = {"dim": width, "depth": depth, "heads": heads, "ffn_dim": 4 * width,
             "subsampling": subsampling, "dropout": 0.1}  # fmt: skip
    reasons = (
        f"{train_size} utterances -> width {width}, {depth} blocks, {heads} heads, "
        f"{subsampling}x subsampling, local attention +-16 frames",
    )
    return FamilySizing(model, None, reasons, width)


def size_graph(info: Any, train_size: int, given: Mapping[str, Any], task: str) -> FamilySizing:
    """A graph Transformer for the user's graphs (a CSV of molecules, an edge list): width and
    depth from the number of training graphs (one graph: from its labelled nodes' few), two
    heads of 16 at D=32, four above; no dropout below 1,000 graphs but on one graph."""
    small = train_size < 1_000
    dim = int(given.get("dim", 32 if small else 64))
    depth = int(given.get("depth", 2 if small else 4))
    model: dict[str, Any] = {"dim": dim, "depth": depth, "heads": _heads(dim, 16)}
    if task == "node-classification":
        model["dropout"] = given.get("dropout", 0.1)  # one graph, few labels: some noise
    reasons = (
        f"{train_size:,} training graph{'s' if train_size != 1 else ''} -> D={dim}, {depth} "
        f"blocks, {model['heads']} heads",
    )
    return FamilySizing(model, None, reasons, dim)


# The sizer of each family sized from the user's data, by its config's ``family``.
SIZERS: dict[str, Sizer] = {
    "speech": size_speech,
    "graph": size_graph,
    "vit": _vit_sizer,
    "deit": size_deit,
    "cnn": size_cnn,
    "swin": size_swin,
    "igpt": size_igpt,
}


def sizer_for(family: str) -> Sizer | None:
    """The sizer of ``family``: its own in :data:`SIZERS`, else that of the nearest family
    whose config class its config subclasses (a plug-in's ViT is sized as ViT); None when
    none (text families: :func:`size_text`)."""
    from tfam.config import config_class

    for klass in config_class(family).__mro__:
        name = klass.__dict__.get("family")
        if isinstance(name, str) and name in SIZERS:
            return SIZERS[name]
    return None


def size_from_data(
    family: str,
    task: str,
    info: Any,
    train_size: int,
    overrides: Mapping[str, Any] | None = None,
    given_train: Mapping[str, Any] | None = None,
) -> Sizing:
    """The sizing of ``family`` trained for ``task`` on data described by ``info`` (a
    ``DatasetInfo`` with ``image_size``/``in_channels``, a ``PixelInfo`` of images read as
    pixel sequences, or a ``TextDatasetInfo`` with ``max_length``), ``train_size`` examples
    in the split trained on. ``overrides``: the user's ``--set`` values; ``given_train``:
    TrainConfig values the user gave (their ``batch_size`` and ``epochs`` shape the rest of
    the schedule)."""
    given_train = dict(given_train or {})
    given = dict(overrides or {})
    sizer = sizer_for(family)
    images = getattr(info, "image_size", None) is not None
    if sizer is not None:
        sized = sizer(info, train_size, given, task)
    elif images:  # an image family without a sizer (a plug-in): its own defaults
        from tfam.models import create_config

        width = int(given.get("dim", getattr(create_config(family), "dim", 128) or 128))
        sized = FamilySizing({}, None, (f"{family}: no sizing from images, its defaults",), width)
    else:
        model, reasons = size_text(
            family,
            train_size,
            getattr(info, "max_length", None),
            getattr(info, "train_tokens", None),
            given,
        )
        sized = FamilySizing(model, None, tuple(reasons), int(model["dim"]))
    train, more = plan_schedule(
        train_size,
        width=sized.width,
        text=sizer is None and not images,
        classifier=task in CLASSIFIER_TASKS,
        batch_size=given_train.get("batch_size"),
        epochs=given_train.get("epochs"),
    )
    threads = 1 if sized.width <= 128 else None
    return Sizing(
        model=sized.model,
        train=train,
        image_size=sized.image_size,
        reasons=(*sized.reasons, *more),
        threads=threads,
    )


def _reads_image_tokens(family: str) -> bool:
    """Whether ``family``'s model reads images as tokens (``inputs = "tokens"`` and
    ``image_tokens``: iGPT), asked of its class."""
    from tfam.models import MODEL_CLASSES

    cls = MODEL_CLASSES.get(family)
    return cls is not None and cls.inputs == "tokens" and bool(getattr(cls, "image_tokens", False))


def pixel_side(height: int, width: int) -> tuple[int, int]:
    """(H, W) an image is averaged to for a GPT over pixels: divided by the smallest integer
    f that brings its longer side to <= MAX_PIXEL_SIDE (28 -> 14, 40 -> 13, 224 -> 16)."""
    f = max(1, -(-max(height, width) // MAX_PIXEL_SIDE))
    return max(1, height // f), max(1, width // f)


def entry_for_family(
    family: str, entry: Any, *, run: str | None = None, what: str = "--init"
) -> Any:
    """``entry`` as ``family``'s model reads it: an image folder for a model that reads images
    as tokens (iGPT) becomes palette-id sequences
    (:func:`tfam.data.catalog.pixel_folder_entry`), anything else is returned as it is.

    The image size and palette are ``run``'s (a run directory that keeps a palette.json: the
    run ``what`` names, --init or a resumed --out), so its ids mean the same colours; else
    chosen here: :func:`pixel_side`, 16 grey levels for grey images, k-means colours fitted
    (seed 0) on the training split's pixels for colour ones (16 below 1,000 images, 32 below
    20,000, else 64). A run whose palette is for other images than the folder's (grey against
    colour) is one line."""
    if not getattr(entry, "is_folder", False) or getattr(entry.info, "image_size", None) is None:
        return entry
    if not _reads_image_tokens(family):
        return entry
    from tfam.data.catalog import pixel_folder_entry, run_pixels
    from tfam.data.sources.folder import ImageFolder
    from tfam.data.vision.palette import GreyPalette, KMeansPalette

    folder = entry.info.name
    pixels = run_pixels(run) if run is not None and Path(run).expanduser().is_dir() else None
    if pixels is not None:
        palette, (c, h, w) = pixels
        if c != int(entry.info.in_channels):
            raise ValueError(
                f"{what} {run!r} is invalid for --data {folder}: its palette "
                f"({palette.describe()}) is for {c}-channel images, the folder's images have "
                f"{entry.info.in_channels} channels; fine-tune on images of its kind, or train "
                f"without {what}"
            )
        return pixel_folder_entry(entry.name, (h, w), palette)
    h, w = pixel_side(*_pair(entry.info.image_size))
    if int(entry.info.in_channels) == 1:
        palette = GreyPalette(GREY_LEVELS, scale=255)
    else:
        images = ImageFolder(entry.name, entry.train_split, image_size=(h, w)).pixels()
        n = images.shape[0]
        k = 16 if n < 1_000 else 32 if n < 20_000 else 64
        palette = KMeansPalette.fit(images, k=min(k, n * h * w), seed=0)
    return pixel_folder_entry(entry.name, (h, w), palette)


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
    as it is, with None (catalog data sets keep their recipes). An image folder for a model
    that reads images as tokens is expected already read as pixels (:func:`entry_for_family`)."""
    if not getattr(entry, "is_folder", False) or preset is not None or init is not None:
        return entry, None
    train_size = len(entry.load(entry.train_split))
    sizing = size_from_data(family, task, entry.info, train_size, overrides, given_train)
    if sizing.image_size is not None:
        from tfam.data.catalog import folder_entry

        entry = folder_entry(entry.name, image_size=sizing.image_size)
    return entry, sizing
