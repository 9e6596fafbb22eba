"""Rows of the blocks and the stacks: each block lists its sub-layers (norm, attention or MLP,
residual; window partition and merge around a windowed attention) in the order its norm
placement runs them; a stack shows block 1 in full and one summary row for the others
(``blocks="first"``), or every block (``blocks="all"``); a stage stack does so per stage, with
a patch merging row between stages."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from torch import nn

from tfam.explain.bricks import (
    Explainer,
    attention_rows,
    brick_symbols,
    mlp_rows,
    norm_row,
    patch_merging_rows,
    residual_row,
)
from tfam.explain.table import ExplainRow
from tfam.layers import DecoderBlock, StageStack, TransformerStack, WindowPartition


def partition_rows(
    ex: Explainer, blk: nn.Module, block: str, step: str, L: str, group: str
) -> list[ExplainRow]:
    """Self-attention within a block's ``token_partition`` (Swin's windows): partition rows,
    the attention over ``group`` tokens per window (the windows join the batch axis), merge."""
    t, part = ex.trace, blk.token_partition
    tokens, windows = t.call(blk).inputs[0], t.call(blk.mhsa).inputs[0]
    # A shifted partition brings its region mask; on a grid of one window it does not shift.
    shift = getattr(part, "shift", 0) if "mask" in t.call(blk.mhsa).kwargs else 0
    nw = windows[0] // tokens[0]
    what = "window" if isinstance(part, WindowPartition) else "token"
    note = (
        f"{what} partition: {L} = {tokens[1]} tokens -> nW = {nw} groups of {group} = "
        f"{windows[1]} tokens per sample; the groups join the batch axis (B*nW)"
    )
    if nw * windows[1] != tokens[1]:
        note += "; zero tokens pad the grid to whole windows"
    if shift:
        note += f"; the grid is rolled by -{shift} along both axes first (shifted windows)"
    merged = "reverses it: groups back on the grid" + (f", rolled by +{shift}" if shift else "")
    if nw * windows[1] != tokens[1]:
        merged += ", padding removed"
    suffix = f" (shift {shift})" if shift else ""
    masked = "tokens the roll brought from other regions of the grid"
    return [
        ExplainRow(f"{what} partition{suffix}", tokens, windows, f"{L} x D", f"{group} x D", 0,
                   0, block, note=note),
        *attention_rows(ex, blk.mhsa, block, f"{step} in {what}s", group, masked=masked),
        ExplainRow(f"{what} merge{suffix}", t.call(blk.mhsa).output, tokens, f"{group} x D",
                   f"{L} x D", 0, 0, block, note=f"{what} merge: {merged}"),
    ]  # fmt: skip


def block_rows(
    ex: Explainer,
    blk: nn.Module,
    block: str,
    L: str,
    memory: str | None = None,
    group: str = "(Ws*Ws)",
) -> list[ExplainRow]:
    """An EncoderBlock's or DecoderBlock's rows over ``L`` tokens (a DecoderBlock's
    cross-attention reads ``memory`` tokens; a block with a ``token_partition`` attends within
    groups of ``group`` tokens).

    pre-norm:  X1 = X0 + MHSA(LN(X0)) [; X2 = X1 + CrossAttn(LN(X1), M)]; X_out = .. + MLP(LN(..))
    post-norm: LN after each residual instead of before each sub-layer.
    """
    t = ex.trace
    causal = t.call(blk.mhsa).flags.get("is_causal", False)
    # (norm, sub-layer, step, key symbols for cross-attention, name and extra argument in the
    # residual's formula)
    parts: list[tuple[nn.Module, nn.Module, str, str | None, str, str]] = [
        (blk.norm1, blk.mhsa, "masked MHSA" if causal else "MHSA", None, "MHSA", "")
    ]
    if isinstance(blk, DecoderBlock):
        if memory is None:
            raise ValueError("a decoder block's rows need the symbol of the memory length")
        parts.append(
            (blk.norm_cross, blk.cross_attn, "cross-attention", memory, "CrossAttn", ", M")
        )
    parts.append((blk.norm2, blk.mlp, "MLP", None, "MLP", ""))

    partitioned = getattr(blk, "token_partition", None) is not None

    def sublayer(module: nn.Module, step: str, keys: str | None) -> list[ExplainRow]:
        if module is blk.mlp:
            return mlp_rows(ex, module, block, step, L)
        if module is blk.mhsa and partitioned:
            return partition_rows(ex, blk, block, step, L, group)
        return attention_rows(ex, module, block, step, L, keys)

    rows: list[ExplainRow] = []
    for i, (norm, module, step, keys, name, extra) in enumerate(parts):
        # A partition's attention runs on groups; its residual adds the merged tokens.
        grouped = module is blk.mhsa and partitioned
        branch = t.call(blk).inputs[0] if grouped else t.call(module).output
        if blk.norm_first:  # X_{i+1} = X_i + F(LN(X_i)); the sum feeds the next norm
            last = i == len(parts) - 1
            out = t.call(blk).output if last else t.call(parts[i + 1][0]).inputs[0]
            target = "X_out" if last else f"X{i + 1}"
            formula = f"{target} = X{i} + {name}(LN(X{i}){extra})"
            rows += [norm_row(ex, norm, block, "LN", L), *sublayer(module, step, keys)]
            rows.append(residual_row(block, branch, out, formula, L))
        else:  # post-norm (original Transformer): X_{i+1} = LN(X_i + F(X_i))
            out = t.call(norm).inputs[0]
            formula = f"X{i} + {name}(X{i}{extra}), normalised next"
            rows += [*sublayer(module, step, keys), residual_row(block, branch, out, formula, L)]
            rows.append(norm_row(ex, norm, block, "LN", L))
    return rows


def stack_rows(
    ex: Explainer, stack: TransformerStack, L: str, memory: str | None = None, label: str = ""
) -> list[ExplainRow]:
    """A TransformerStack's rows: every block is explained (so every parameter is claimed and
    every shape checked), then shown per ``ex.blocks``. ``label`` prefixes the block numbers
    (two stacks in one model)."""
    if len({id(b) for b in stack.blocks}) < len(stack.blocks):
        raise ValueError(
            "explain does not yet show a stack whose blocks share weights (share_layers=True): "
            "its rows claim each block's parameters once per block"
        )
    per_block = [
        block_rows(ex, blk, f"{label}{i}", L, memory) for i, blk in enumerate(stack.blocks, start=1)
    ]
    for rows in per_block:
        ex.check_symbols(rows)
    return [*bias_rows(ex, stack, L, label), *shown(ex, per_block, label)]


def bias_rows(ex: Explainer, stack: TransformerStack, L: str, label: str = "") -> list[ExplainRow]:
    """The stack's shared score bias (ALiBi, T5's relative bias), when it has one: computed
    once per forward as (H, L, L) from the positions and added to the self-attention scores of
    every block (those adds are counted here, 1 per score of each sample and block)."""
    provider = stack.bias_provider
    if provider is None or not stack.blocks:
        return []
    t = ex.trace
    b = t.call(stack.blocks[0]).inputs[0][0]
    heads, lq, lk = t.call(provider).output
    depth = len(stack.blocks)
    return [
        ExplainRow(f"{label}position bias", (b, lq, lk), (b, heads, lq, lk), f"{L} x {L}",
                   f"H x {L} x {L}", ex.claim(f"{label}position bias", provider),
                   depth * b * heads * lq * lk,
                   note="a bias per head from each query-key distance j - i, computed once "
                   f"per forward and added to the self-attention scores of all {depth} "
                   f"block{'' if depth == 1 else 's'} ({type(provider).__name__})"),
    ]  # fmt: skip


def shown(ex: Explainer, per_block: list[list[ExplainRow]], label: str) -> list[ExplainRow]:
    """Every block's rows (``blocks='all'``), or block 1's and a summary row for the others."""
    if ex.blocks == "all" or len(per_block) <= 1:
        return [r for rows in per_block for r in rows]
    return [*per_block[0], summary_row(per_block, label)]


_STAGE_SYMBOLS = re.compile(r"\b(N|Ws|D|H|Dh|F)\b")


def stage_stack_rows(ex: Explainer, stack: StageStack, grid: tuple[int, int]) -> list[ExplainRow]:
    """A StageStack's rows for an input on ``grid``: per stage s its patch merging (from the
    second stage on) and its blocks (labelled "s.i"), shown per ``ex.blocks``.

    Widths, heads and lengths differ per stage, so stage s has its own symbols: N<s> tokens on
    its grid, D<s>, H<s>, Dh<s>, F<s> and the window side Ws<s> (added to ``ex.env``)."""
    rows: list[ExplainRow] = []
    for s, (stage, g) in enumerate(zip(stack.stages, stack.grids(grid), strict=True), start=1):
        c = stack.configs[s - 1]
        local = {"N": g[0] * g[1], **brick_symbols(c)}
        if stage.spec.window is not None:
            local["Ws"] = stage.spec.window
        ex.env.update({f"{k}{s}": v for k, v in local.items()})
        if stage.downsample is not None:
            src, dst = (f"N{s - 1}", f"D{s - 1}"), (f"N{s}", f"D{s}")
            merge = patch_merging_rows(ex, stage.downsample, f"{s - 1}->{s}", src, dst)
            ex.check_symbols(merge)
            rows += merge
        # The bricks write D, H, ...: check them with this stage's values, then name them D<s>.
        outer, ex.env = ex.env, {**ex.env, **local}
        try:
            per_block = [
                block_rows(ex, blk, f"{s}.{i}", "N") for i, blk in enumerate(stage.blocks, 1)
            ]
            for block in per_block:
                ex.check_symbols(block)
        finally:
            ex.env = outer

        def named(row: ExplainRow, s: int = s) -> ExplainRow:
            def sub(text: str) -> str:
                return _STAGE_SYMBOLS.sub(lambda m: f"{m[1]}{s}", text)

            return dataclasses.replace(
                row, input_symbols=sub(row.input_symbols), output_symbols=sub(row.output_symbols)
            )

        rows += shown(ex, [[named(r) for r in block] for block in per_block], f"{s}.")
    return rows


def summary_row(per_block: list[list[ExplainRow]], label: str = "") -> ExplainRow:
    """One row standing for blocks 2..N, with their exact parameter and FLOP sums."""

    def signature(rows: list[ExplainRow]) -> list[tuple[Any, ...]]:
        return [(r.step, r.input_shape, r.output_shape, r.params, r.flops, r.level) for r in rows]

    rest = per_block[1:]
    first = signature(per_block[0])
    same = all(signature(rows) == first for rows in rest)
    span = f"{label}2..{len(per_block)}"
    return ExplainRow(
        f"same as block 1 (x {len(rest)})" if same else "blocks differ from block 1",
        rest[0][0].input_shape,
        rest[-1][-1].output_shape,
        rest[0][0].input_symbols,
        rest[-1][-1].output_symbols,
        sum(r.params for rows in rest for r in rows if r.level == 0),
        sum(r.flops for rows in rest for r in rows if r.level == 0),
        span,
        note=(
            f"blocks {span} repeat block 1 step for step; blocks='all' lists them"
            if same
            else f"blocks {span} differ from block 1; blocks='all' (--blocks all) lists them"
        ),
    )
