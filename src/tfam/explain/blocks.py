"""Rows of the blocks and the stack: each block lists its sub-layers (norm, attention or MLP,
residual) in the order its norm placement runs them; a stack shows block 1 in full and one
summary row for the others (``blocks="first"``), or every block (``blocks="all"``)."""

from __future__ import annotations

from typing import Any

from torch import nn

from tfam.explain.bricks import Explainer, attention_rows, mlp_rows, norm_row, residual_row
from tfam.explain.table import ExplainRow
from tfam.layers import DecoderBlock, TransformerStack


def block_rows(
    ex: Explainer, blk: nn.Module, block: str, L: str, memory: str | None = None
) -> list[ExplainRow]:
    """An EncoderBlock's or DecoderBlock's rows over ``L`` tokens (a DecoderBlock's
    cross-attention reads ``memory`` tokens).

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

    def sublayer(module: nn.Module, step: str, keys: str | None) -> list[ExplainRow]:
        if module is blk.mlp:
            return mlp_rows(ex, module, block, step, L)
        return attention_rows(ex, module, block, step, L, keys)

    rows: list[ExplainRow] = []
    for i, (norm, module, step, keys, name, extra) in enumerate(parts):
        branch = t.call(module).output
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
    per_block = [
        block_rows(ex, blk, f"{label}{i}", L, memory) for i, blk in enumerate(stack.blocks, start=1)
    ]
    for rows in per_block:
        ex.check_symbols(rows)
    if ex.blocks == "all" or len(per_block) <= 1:
        return [r for rows in per_block for r in rows]
    return [*per_block[0], summary_row(per_block, label)]


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
