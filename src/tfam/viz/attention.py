"""Where a Vision Transformer looks: per-head attention maps and attention rollout.

Rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers"): attention alone
ignores the residual connections that carry each token forward, so for every block l

    A_l = mean over heads of the attention weights          (B, L, L)
    Â_l = (A_l + I) / row sums                              rows sum to 1 again
    R   = Â_depth @ ... @ Â_2 @ Â_1                         (B, L, L)

and R[b, i, j] is how much of token j flows into token i at the output. The [CLS] row over the
patches, R[:, 0, prefix:], is the map that explains the classification.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tfam.viz.figure import save_figure

__all__ = ["AttentionMaps", "attention_maps", "attention_rollout", "plot_attention"]


def attention_rollout(attentions: Sequence[Tensor], discard_ratio: float = 0.0) -> Tensor:
    """Attention rollout through all blocks (module docstring has the formula).

    attentions: one tensor per block, each (B, H, L, L), rows = queries (a list, or the
    :class:`~tfam.models.AttentionWeights` that ``model(x, return_attention=True)`` returns:
    its main stack's blocks). discard_ratio: in [0, 1); before the identity is added,
    the smallest ``floor(discard_ratio * L)`` weights of every row of the head-averaged map are
    set to zero (a variant that sharpens maps by dropping low-attention noise; 0 keeps all).
    -> (B, L, L) float32, each row summing to 1.
    """
    if len(attentions) == 0:
        raise ValueError("attentions is empty: expected one (B, H, L, L) tensor per block")
    if not 0.0 <= discard_ratio < 1.0:
        raise ValueError(f"discard_ratio={discard_ratio!r} is invalid: expected a float in [0, 1)")
    rollout: Tensor | None = None
    for i, a in enumerate(attentions):
        if a.ndim != 4 or a.shape[-1] != a.shape[-2]:
            raise ValueError(f"attentions[{i}] has shape {tuple(a.shape)}; expected (B, H, L, L)")
        if rollout is not None and a.shape[-1] != rollout.shape[-1]:
            raise ValueError(
                f"attentions[{i}] has L={a.shape[-1]}, earlier blocks L={rollout.shape[-1]}"
            )
        fused = a.detach().float().mean(dim=1)  # (B, L, L)
        length = fused.shape[-1]
        drop = int(math.floor(discard_ratio * length))
        if drop:
            smallest = fused.topk(drop, dim=-1, largest=False).indices
            fused = fused.scatter(-1, smallest, 0.0)
        # + I models the residual path; renormalising keeps every row a distribution.
        fused = fused + torch.eye(length, dtype=fused.dtype, device=fused.device)
        fused = fused / fused.sum(dim=-1, keepdim=True)
        rollout = fused if rollout is None else fused @ rollout
    assert rollout is not None
    return rollout


@dataclass
class AttentionMaps:
    """Per-patch attention of one image.

    heads: (H, gh, gw) the chosen block's per-head map. rollout: (gh, gw) rollout map.
    mode: "cls" ([CLS] row: where the classifying token looks) or "mean" (mean attention each
    patch receives from all tokens, for models without a [CLS] token or with pool='mean').
    layer: 0-based block index of ``heads``; depth: number of blocks. probs: (K,) class
    probabilities of the image.
    """

    heads: Tensor
    rollout: Tensor
    mode: str
    layer: int
    depth: int
    probs: Tensor


def _resolve_layer(layer: int, depth: int) -> int:
    if not isinstance(layer, int) or isinstance(layer, bool) or not -depth <= layer < depth:
        raise ValueError(
            f"layer={layer!r} is invalid: the model has {depth} blocks; expected an index in "
            f"0..{depth - 1} or -{depth}..-1 (from the end)"
        )
    return layer % depth


def attention_maps(
    model: nn.Module, image: Tensor, layer: int = -1, discard_ratio: float = 0.0
) -> AttentionMaps:
    """Run ``model(x, return_attention=True)`` on one image and cut the maps per patch.

    image: (C, H, W) or (1, C, H, W), normalised as the model was trained. layer: 0-based block
    index, negative from the end. Works whatever attention kernel the model runs: the model
    returns weights on request.
    """
    x = image.unsqueeze(0) if image.ndim == 3 else image
    if x.ndim != 4 or x.shape[0] != 1:
        raise ValueError(
            f"image has shape {tuple(image.shape)}; expected (C, H, W) or (1, C, H, W)"
        )
    if getattr(type(model), "attention_layout", "tokens") == "windows":
        raise ValueError(
            f"{type(model).__name__} attends within windows (no [CLS] row, no map over the whole "
            "image to roll out): draw its windows and their attention with `tfam viz windows`"
        )
    config = getattr(model, "config", None)
    patch = getattr(config, "patch_size", None)
    if patch is None:
        raise ValueError(
            f"{type(model).__name__} has no config.patch_size: attention maps need a ViT-like model"
        )
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            param = next(model.parameters(), None)
            device = param.device if param is not None else torch.device("cpu")
            logits, attentions = model(x.to(device), return_attention=True)
    finally:
        model.train(was_training)
    if not attentions:
        raise ValueError("the model has no attention blocks (depth=0): nothing to show")
    attentions = [a.float().cpu() for a in attentions]
    depth = len(attentions)
    index = _resolve_layer(layer, depth)
    prefix = int(getattr(model, "num_prefix_tokens", 1 if getattr(config, "class_token", 1) else 0))
    gh, gw = x.shape[-2] // patch[0], x.shape[-1] // patch[1]
    length = attentions[0].shape[-1]
    if length != prefix + gh * gw:
        raise ValueError(
            f"attention has L={length} tokens, expected {prefix} prefix + {gh}x{gw} patches"
        )
    mode = "cls" if prefix > 0 and getattr(config, "pool", "cls") == "cls" else "mean"
    chosen = attentions[index][0]  # (H, L, L)
    rollout = attention_rollout(attentions, discard_ratio)[0]  # (L, L)
    if mode == "cls":
        heads = chosen[:, 0, prefix:]  # (H, N): [CLS] query over patch keys
        rolled = rollout[0, prefix:]
    else:
        heads = chosen[:, :, prefix:].mean(dim=1)  # (H, N): mean over queries, received per patch
        rolled = rollout[:, prefix:].mean(dim=0)
    return AttentionMaps(
        heads=heads.reshape(-1, gh, gw),
        rollout=rolled.reshape(gh, gw),
        mode=mode,
        layer=index,
        depth=depth,
        probs=logits.float().softmax(dim=-1)[0].cpu(),
    )


def _upsample(grid: Tensor, size: tuple[int, int]) -> np.ndarray:
    """(gh, gw) patch map -> (H, W), bilinear, so it lies over the image pixel for pixel."""
    up = F.interpolate(grid[None, None].float(), size=size, mode="bilinear", align_corners=False)
    return up[0, 0].numpy()


def _display_pixels(image: Tensor) -> np.ndarray:
    """A normalised (C, H, W) tensor -> (H, W, C) in [0, 1] by min-max, when no pixels are given."""
    arr = image.detach().float().cpu().permute(1, 2, 0).numpy()
    lo, hi = float(arr.min()), float(arr.max())
    return (arr - lo) / (hi - lo) if hi > lo else np.zeros_like(arr)


def _show_image(ax, pixels: np.ndarray, alpha: float = 1.0) -> None:  # noqa: ANN001
    if pixels.ndim == 3 and pixels.shape[-1] == 1:
        ax.imshow(
            pixels[..., 0], cmap="gray", vmin=0.0, vmax=1.0, interpolation="nearest", alpha=alpha
        )
    else:
        ax.imshow(np.clip(pixels, 0.0, 1.0), interpolation="nearest", alpha=alpha)
    ax.set_xticks([])
    ax.set_yticks([])


def plot_attention(
    model: nn.Module,
    image_tensor: Tensor,
    out: str | Path | None = None,
    *,
    pixels: np.ndarray | None = None,
    layer: int = -1,
    discard_ratio: float = 0.0,
    classes: Sequence[str] | None = None,
    label: int | None = None,
    title: str | None = None,
):  # noqa: ANN201  (a matplotlib Figure)
    """Input image, one panel per head of block ``layer`` and the rollout, each heat map
    upsampled to the image size and laid over the image; saved to ``out`` (PNG) when given.

    image_tensor: (C, H, W) normalised model input. pixels: (H, W, C) in [0, 1] to display
    (default: the tensor, min-max scaled). classes: names for the title; label: the true class.
    Returns the matplotlib Figure (drawn with the Agg canvas; pyplot is not used).
    """
    from matplotlib.figure import Figure

    maps = attention_maps(model, image_tensor, layer=layer, discard_ratio=discard_ratio)
    img = image_tensor[0] if image_tensor.ndim == 4 else image_tensor
    size = (img.shape[-2], img.shape[-1])
    if pixels is None:
        pixels = _display_pixels(img)
    pixels = np.asarray(pixels, dtype=np.float32)
    if pixels.ndim == 2:
        pixels = pixels[..., None]
    num_heads = maps.heads.shape[0]
    panels = [("input", None)]
    for h in range(num_heads):
        panels.append((f"head {h + 1}", maps.heads[h]))
    panels.append((f"rollout, {maps.depth} blocks", maps.rollout))

    n = len(panels)
    rows = math.ceil(n / 6)
    cols = math.ceil(n / rows)
    fig = Figure(figsize=(2.9 * cols, 2.9 * rows + 0.9), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[n:]:
        ax.set_axis_off()
    for ax, (name, grid) in zip(axes, panels):
        if grid is None:
            _show_image(ax, pixels)
            ax.set_title(name)
            continue
        heat = _upsample(grid, size)
        _show_image(ax, pixels)
        im = ax.imshow(heat, cmap="inferno", alpha=0.6, interpolation="bilinear")
        ax.set_title(name, fontweight="bold" if name.startswith("rollout") else "normal")
        bar = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.03)
        bar.ax.tick_params(labelsize=7)
        bar.set_label("rollout weight" if grid is maps.rollout else "attention weight", fontsize=8)
        bar.solids.set_alpha(1.0)

    probs = maps.probs
    top = int(probs.argmax())
    names = list(classes) if classes is not None else [str(i) for i in range(len(probs))]
    headline = title or (
        f"Attention of the [CLS] token over the patches: block {maps.layer + 1}/{maps.depth} "
        "per head, and rollout"
        if maps.mode == "cls"
        else f"No [CLS] token (pool='mean'): mean attention each patch receives, block "
        f"{maps.layer + 1}/{maps.depth} per head, and rollout"
    )
    verdict = f"predicted {names[top]} ({100 * float(probs[top]):.1f}%)"
    if label is not None:
        ok = "correct" if label == top else "wrong"
        verdict += f", true {names[label]} ({ok})"
    verdict += "  ·  bright = more attention"
    fig.suptitle(f"{headline}\n{verdict}", fontsize=11)
    return save_figure(fig, out)
