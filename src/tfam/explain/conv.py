"""Rows of the convolutional bricks (:mod:`tfam.layers.conv`): the stem, each residual block's
convolutions (conv + BatchNorm [+ activation] as one row per conv, with its FLOPs), the
shortcut, the residual add; per stage block 1 in full and a summary row for the others
(``blocks="first"``), or every block.

Symbols: C channels, H_img x W_img image; D0 the stem's width on an h0 x w0 map (the 7x7 conv's
hc x wc before the pool); stage s: D<s> wide on an h<s> x w<s> map, a bottleneck's inner width
M<s> = D<s> / 4. A conv's FLOPs are 2 * (C_in * k * k) * (outputs) (no bias: BatchNorm
follows), BatchNorm 2 per element (the inference form, one scale and one shift per channel).
"""

from __future__ import annotations

import dataclasses

from torch import nn

from tfam.explain.blocks import summary_row
from tfam.explain.bricks import Explainer
from tfam.explain.table import FLOPS_PER_ELEMENT, ExplainRow
from tfam.explain.trace import numel
from tfam.layers.conv import BottleNeckLayer, ConvEncoder, ConvLayer, ConvStem, ShortCut


def conv_symbols(stem: ConvStem, encoder: ConvEncoder, size: tuple[int, int]) -> dict[str, int]:
    """The values of the conv symbols for an image of ``size`` (H_img, W_img)."""
    env: dict[str, int] = {"D0": stem.embedder.convolution.out_channels}
    if stem.kind == "resnet":
        env["hc"], env["wc"] = -(-size[0] // 2), -(-size[1] // 2)
    env["h0"], env["w0"] = grid = stem.output_size(size)
    for s, (stage, (h, w)) in enumerate(zip(encoder.stages, encoder.grids(grid)), start=1):
        first = stage.layers[0]
        env[f"D{s}"], env[f"h{s}"], env[f"w{s}"] = first.layer[-1].convolution.out_channels, h, w
        if isinstance(first, BottleNeckLayer):
            env[f"M{s}"] = first.layer[0].convolution.out_channels
    return env


ACT_TITLES = {"relu": "ReLU", "gelu": "GELU", "silu": "SiLU"}


def _act_name(module: nn.Module) -> str:
    return {nn.ReLU: "relu", nn.GELU: "gelu", nn.SiLU: "silu"}.get(type(module), "")


def conv_flops(conv: nn.Conv2d, out: tuple[int, ...]) -> int:
    """2 * (C_in / groups * kh * kw) per output element, + 1 per output for a bias."""
    per_output = conv.weight[0].numel()
    return 2 * per_output * numel(out) + (numel(out) if conv.bias is not None else 0)


def _describe(conv: nn.Conv2d) -> str:
    k, s = conv.kernel_size, conv.stride[0]
    return f"conv {k[0]}x{k[1]}" + (f"/{s}" if s != 1 else "")


def conv_layer_row(
    ex: Explainer, layer: ConvLayer | ShortCut, block: str, step: str, src: str, dst: str
) -> ExplainRow:
    """One conv + BatchNorm [+ activation]: ``src`` -> ``dst`` symbols ("D1 x h1 x w1")."""
    call = ex.trace.call(layer)
    out = call.output
    act = _act_name(getattr(layer, "activation", nn.Identity()))
    flops = conv_flops(layer.convolution, out) + FLOPS_PER_ELEMENT["batchnorm"] * numel(out)
    name = _describe(layer.convolution) + " + BN" + (f" + {ACT_TITLES[act]}" if act else "")
    if act:
        flops += FLOPS_PER_ELEMENT[act] * numel(out)
    c = layer.convolution
    note = (
        f"{c.kernel_size[0]}x{c.kernel_size[1]} convolution, stride {c.stride[0]}, padding "
        f"{c.padding[0]}, no bias; BatchNorm per channel (batch statistics in training, "
        "running ones in eval)"
    )
    return ExplainRow(f"{step}{name}", call.inputs[0], out, src, dst,
                      ex.claim(f"block {block} {step}{name}", layer), flops, block,
                      note=note)  # fmt: skip


def stem_rows(ex: Explainer, stem: ConvStem, src: str = "C x H_img x W_img") -> list[ExplainRow]:
    """The stem: its conv row and, for the ImageNet stem, the max-pool."""
    if stem.kind == "small":
        return [conv_layer_row(ex, stem.embedder, "", "stem ", src, "D0 x h0 x w0")]
    pool = ex.trace.call(stem.pooler)
    k = stem.pooler.kernel_size
    return [
        conv_layer_row(ex, stem.embedder, "", "stem ", src, "D0 x hc x wc"),
        ExplainRow(f"stem max-pool {k}x{k}/{stem.pooler.stride}", pool.inputs[0], pool.output,
                   "D0 x hc x wc", "D0 x h0 x w0", 0, (k * k - 1) * numel(pool.output),
                   note=f"the largest of each {k}x{k} window (k*k - 1 comparisons an output), "
                   f"stride {stem.pooler.stride}, padding {stem.pooler.padding}"),
    ]  # fmt: skip


def residual_block_rows(
    ex: Explainer, blk: nn.Module, block: str, s: int, first: bool
) -> list[ExplainRow]:
    """A basic or bottleneck block of stage ``s``: its convs, the shortcut, the add + act."""
    src = f"D{s - 1} x h{s - 1} x w{s - 1}" if first else f"D{s} x h{s} x w{s}"
    dst = f"D{s} x h{s} x w{s}"
    if isinstance(blk, BottleNeckLayer):
        a, b, c = blk.layer
        mid_in = (
            f"M{s} x h{s - 1} x w{s - 1}"
            if first and a.convolution.stride[0] == 1
            else (f"M{s} x h{s} x w{s}")
        )
        rows = [
            conv_layer_row(ex, a, block, "reduce ", src, mid_in),
            conv_layer_row(ex, b, block, "", mid_in, f"M{s} x h{s} x w{s}"),
            conv_layer_row(ex, c, block, "expand ", f"M{s} x h{s} x w{s}", dst),
        ]
    else:
        a, b = blk.layer
        rows = [
            conv_layer_row(ex, a, block, "", src, dst),
            conv_layer_row(ex, b, block, "", dst, dst),
        ]
    if isinstance(blk.shortcut, ShortCut):
        rows.append(conv_layer_row(ex, blk.shortcut, block, "shortcut ", src, dst))
    out = ex.trace.call(blk).output
    act = _act_name(blk.activation)
    shortcut = "the shortcut's projection" if isinstance(blk.shortcut, ShortCut) else "the input"
    rows.append(
        ExplainRow(f"residual + {ACT_TITLES.get(act, act)}", out, out, dst, dst, 0,
                   (1 + FLOPS_PER_ELEMENT.get(act, 0)) * numel(out), block,
                   note=f"y = {act}(branch + {shortcut})"),
    )  # fmt: skip
    bottleneck = isinstance(blk, BottleNeckLayer)
    stride = max(r.stride[0] for r in blk.modules() if isinstance(r, nn.Conv2d))
    formula = (
        "y = act(x' + BN(conv1x1(act(BN(conv3x3(act(BN(conv1x1(x)))))))))"
        if bottleneck
        else "y = act(x' + BN(conv3x3(act(BN(conv3x3(x))))))"
    )
    head = ExplainRow(
        ("bottleneck block" if bottleneck else "basic block") + (f" /{stride}" if stride > 1 else ""),
        ex.trace.call(blk).inputs[0], out, src, dst, sum(r.params for r in rows),
        sum(r.flops for r in rows), block,
        note=f"{formula}; x' = x, or BN(conv1x1(x)) where the width or the map changes",
    )  # fmt: skip
    rows = [head, *(dataclasses.replace(r, level=1) for r in rows)]
    ex.check_symbols(rows)
    return rows


def encoder_rows(ex: Explainer, encoder: ConvEncoder) -> list[ExplainRow]:
    """Every stage's blocks (labelled "s.i"), shown per ``ex.blocks``."""
    rows: list[ExplainRow] = []
    for s, stage in enumerate(encoder.stages, start=1):
        per_block = [
            residual_block_rows(ex, blk, f"{s}.{i}", s, i == 1)
            for i, blk in enumerate(stage.layers, start=1)
        ]
        rows += stage_shown(ex, per_block, f"{s}.")
    return rows


def stage_shown(ex: Explainer, per_block: list[list[ExplainRow]], label: str) -> list[ExplainRow]:
    """Every block's rows (``blocks='all'``), or block 1's and one row for the others. A
    stage's first block changes the width or the map and the others do not, so the others are
    compared with each other (block 2), not with block 1."""
    if ex.blocks == "all" or len(per_block) <= 2:
        return [r for rows in per_block for r in rows]
    row = summary_row([per_block[1], *per_block[1:]], label)
    span, k = f"{label}2..{len(per_block)}", len(per_block) - 1
    row = dataclasses.replace(row, block=span)
    if row.step.startswith("same as"):
        row = dataclasses.replace(
            row,
            step=f"{k} alike blocks",
            note=f"blocks {span}: the stage's later blocks, alike (width and map kept, identity "
            "shortcut); blocks='all' (--blocks all) lists them",
        )
    return [*per_block[0], row]
