"""Rows of the bricks: norm, residual, attention (self, masked and cross), MLP.

Each function takes the :class:`Explainer` of the model at hand (its trace, the values of its
shape symbols, which step claimed each parameter), the block label and the symbols of the
sequence lengths: ``"(N+1)"`` in a ViT, ``"Lt"`` (queries) and ``"Ls"`` (keys) in a decoder's
cross-attention. Shapes come from the trace; symbols are checked against them.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from tfam.config import BaseConfig
from tfam.explain.table import FLOPS_PER_ELEMENT, ExplainRow
from tfam.explain.trace import (
    Call,
    KernelCall,
    Shape,
    Trace,
    eval_symbols,
    linear_flops,
    matmul_flops,
    norm_flops,
    numel,
    param_count,
)


def brick_symbols(config: BaseConfig) -> dict[str, int]:
    """The symbols the bricks' rows are written in, valued for ``config``: D width, H heads,
    Dh = D / H, F = ffn_dim."""
    return {"D": config.dim, "H": config.heads, "Dh": config.head_dim, "F": config.ffn_dim}


class Explainer:
    """What the rows of one model share: its trace, the values of its shape symbols, the block
    view (``blocks``: "first" or "all"), and which step claimed each parameter."""

    def __init__(self, trace: Trace, env: dict[str, int], blocks: str = "first") -> None:
        self.trace, self.env, self.blocks = trace, env, blocks
        self.claimed: dict[int, str] = {}

    def claim(self, step: str, *items: nn.Module | nn.Parameter | None) -> int:
        """Every parameter belongs to exactly one level-0 row; claiming twice is a bug here."""
        for item in items:
            if item is None:
                continue
            params = item.parameters() if isinstance(item, nn.Module) else [item]
            for p in params:
                if id(p) in self.claimed:
                    raise RuntimeError(f"parameter counted twice: {step} and {self.claimed[id(p)]}")
                self.claimed[id(p)] = step
        return param_count(*items)

    def check_symbols(self, rows: list[ExplainRow]) -> None:
        """Each traced shape must equal its symbols evaluated with the symbols' values."""
        for row in rows:
            for shape, text in ((row.input_shape, row.input_symbols),
                                (row.output_shape, row.output_symbols)):  # fmt: skip
                expected = eval_symbols(text, self.env)
                if tuple(shape[1:]) != expected:
                    raise RuntimeError(
                        f"explain: step {row.step!r} traced shape {shape[1:]} but its symbols "
                        f"{text!r} give {expected}; the table and the model disagree"
                    )


# A GRU step per hidden unit besides its matmuls: two sigmoids (negate, exp, add, divide), a
# tanh, and r * (W_hn h + b), + (W_in x + b), 1 - z, (1 - z) * n, z * h and their sum.
GRU_UNIT_FLOPS = 2 * 4 + FLOPS_PER_ELEMENT["tanh"] + 6


def position_network_flops(ex: Explainer, scheme: nn.Module) -> int:
    """FLOPs of the network a position scheme runs to make what it adds (generated
    positions: a depth-wise convolution, a GRU and its projection), from the traced calls;
    0 for a table. The add itself is the caller's (1 per element)."""
    flops = 0
    for module in scheme.modules():
        if isinstance(module, nn.Conv2d):
            out = ex.trace.call(module).output  # (B, D, gh, gw)
            per_output = module.weight[0].numel()  # (in / groups) * kh * kw
            flops += 2 * per_output * numel(out) + (numel(out) if module.bias is not None else 0)
        elif isinstance(module, nn.GRU):
            tokens = numel(ex.trace.call(module).inputs[0][:-1])  # B * L
            h, x = module.hidden_size, module.input_size
            for layer in range(module.num_layers):
                width = x if layer == 0 else h
                # r, z, n: (W_i x + b_i) and (W_h h + b_h), three gates each.
                flops += tokens * (2 * 3 * h * (width + h) + 2 * 3 * h + GRU_UNIT_FLOPS * h)
        elif isinstance(module, nn.Linear):
            flops += linear_flops(module, ex.trace.call(module).inputs[0])
    return flops


def norm_row(ex: Explainer, norm: nn.Module, block: str, step: str, L: str) -> ExplainRow:
    call = ex.trace.call(norm)
    if isinstance(norm, nn.BatchNorm1d):
        note = "BatchNorm of each feature over the batch's tokens (running statistics at inference)"
    elif isinstance(norm, nn.Identity):
        note = "no norm (norm='none'): the identity"
    else:
        kind = "RMSNorm" if isinstance(norm, nn.RMSNorm) else "LayerNorm"
        note = f"{kind} of each token over its D features (not over the batch)"
    return ExplainRow(
        step,
        call.inputs[0],
        call.output,
        f"{L} x D",
        f"{L} x D",
        ex.claim(f"block {block} {step}", norm),
        norm_flops(norm, call.output),
        block,
        note=note,
    )


def residual_row(block: str, branch: Shape, out: Shape, formula: str, L: str) -> ExplainRow:
    return ExplainRow("residual", branch, out, f"{L} x D", f"{L} x D", 0, numel(out), block,
                      note=formula)  # fmt: skip


def _projection_rows(
    ex: Explainer, mha: nn.Module, call: Call, k: KernelCall, block: str, lq: str, lk: str | None
) -> list[ExplainRow]:
    """Self-attention: one row for Q, K, V from X. Cross-attention: Q from X (Lq tokens), K and
    V from the context (Lk tokens), two rows."""
    x, (b, heads, nq, dh), nk = call.inputs[0], k.q, k.k[2]
    fused = "one fused (D x 3D) matmul"
    if lk is None:
        if mha.fused_qkv:
            params, flops = (
                param_count(mha.qkv),
                linear_flops(mha.qkv, ex.trace.call(mha.qkv).inputs[0]),
            )
        else:
            projs = (mha.q_proj, mha.k_proj, mha.v_proj)
            params = param_count(*projs)
            flops = sum(linear_flops(p, ex.trace.call(p).inputs[0]) for p in projs)
            fused = "W_Q, W_K, W_V: three (D x D) matmuls"
        return [
            ExplainRow("Q, K, V projections", x, (b, 3, heads, nq, dh), f"{lq} x D",
                       f"3 x H x {lq} x Dh", params, flops, block, 1,
                       f"Q = X W_Q, K = X W_K, V = X W_V ({fused}), then split into H heads "
                       "of Dh"),
        ]  # fmt: skip
    if "context" not in call.kwargs:
        raise RuntimeError("explain: cross-attention was traced without its context= keys")
    ctx, d = call.kwargs["context"], mha.dim
    if mha.fused_qkv:  # Q and K, V use row slices of the one (3D, D) W_QKV
        q_params = param_count(mha.qkv) // 3
        kv_params, bias = 2 * q_params, mha.qkv.bias is not None
        source = "; row slices of the fused W_QKV"
    else:
        q_params, kv_params = param_count(mha.q_proj), param_count(mha.k_proj, mha.v_proj)
        bias, source = mha.q_proj.bias is not None, ""
    return [
        ExplainRow("Q projection", x, k.q, f"{lq} x D", f"H x {lq} x Dh", q_params,
                   matmul_flops(numel(x[:-1]), d, d, bias), block, 1,
                   f"Q = X W_Q from the {lq} query tokens, split into H heads of Dh{source}"),
        ExplainRow("K, V projections", ctx, (b, 2, heads, nk, dh), f"{lk} x D",
                   f"2 x H x {lk} x Dh", kv_params, 2 * matmul_flops(numel(ctx[:-1]), d, d, bias),
                   block, 1,
                   f"K = M W_K, V = M W_V from the {lk} context tokens M (the encoder output "
                   f"in a decoder), split into H heads of Dh{source}"),
    ]  # fmt: skip


def attention_rows(
    ex: Explainer,
    mha: nn.Module,
    block: str,
    step: str,
    lq: str,
    lk: str | None = None,
    masked: str = "padding",
) -> list[ExplainRow]:
    """A MultiHeadAttention row and its sub-steps. ``lk`` None: self-attention over the
    ``lq`` tokens; otherwise cross-attention, queries from ``lq`` tokens, keys and values from
    ``lk`` context tokens, scores ``lq x lk`` per head. ``masked``: what a mask hides."""
    call, k = ex.trace.call(mha), ex.trace.kernel(mha)
    x, out = call.inputs[0], call.output
    b, heads, nq, dh = k.q
    nk, dv = k.k[2], k.v[3]
    if k.k[:3] != k.v[:3] or (lk is None and k.q != k.k):
        raise RuntimeError(f"self-attention expected equal Q, K, V shapes, got {k}")
    cross = lk is not None
    lk = lk or lq
    causal = call.flags.get("is_causal", False)
    scores = (b, heads, nq, nk)
    # The kernel says what it computes (AttentionKernel.cost, per head and batch row): the
    # (query, key) pairs behind its FLOPs, 4 * pairs * Dh, and the score entries it holds at
    # once. math forms all Lq x Lk; a causal sdpa or a local kernel fewer; a linear one O(L).
    kernel = mha.kernel
    cost = kernel.cost(nq, nk, dh, is_causal=causal)
    additive = kernel.to_options().get("score") == "additive"
    # Additive scores cost more than 4 Dh a pair (their cost() says so); math forms every pair.
    pairs = nq * nk if additive else round(cost.flops / (4 * dh))
    n_scores = b * heads * pairs
    # Scores are held in at least float32 (softmax's precision), for each of the B x H heads.
    item = torch.promote_types(mha.out_proj.weight.dtype, torch.float32).itemsize
    score_bytes = cost.score_elements * item * heads * b
    merged = ex.trace.call(mha.out_proj).inputs[0]
    scale = 1 / math.sqrt(dh)
    score_note = (
        f"per head a {lq} x {lk} = {nq} x {nk} matrix; scaled by 1/sqrt(Dh) = "
        f"1/sqrt({dh}) = {scale:.4g} (the head width, as in every reference "
        "implementation; the source documents write sqrt(D))"
    )
    score_step, score_flops = "scores Q K^T / sqrt(Dh)", 2 * n_scores * dh + n_scores
    if additive:
        da = mha.kernel.v_a.shape[-1]
        score_step = "scores v_a^T tanh(W_a q + U_a k)"
        # W_a q_i and U_a k_j once per query and key; per pair their sum, tanh, v_a^T.
        score_flops = (
            2 * b * heads * (nq + nk) * dh * da + (3 + FLOPS_PER_ELEMENT["tanh"]) * n_scores * da
        )
        score_note = (
            f"per head a {lq} x {lk} = {nq} x {nk} matrix of additive scores (Bahdanau et al. "
            f"2015): W_a, U_a (Dh -> Da = {da}) and v_a (Da) per head, not scaled; they hold "
            f"B x H x {lq} x {lk} x Da = {n_scores * da:,} elements at once"
        )
    if causal:
        score_note += "; causal: no weight on the keys after the query's own position"
    elif "mask" in call.kwargs:
        score_note += f"; masked: no weight on the keys the mask hides ({masked})"
    if pairs != nq * nk:
        score_note += (
            f"; attention={kernel.name!r} computes {pairs:,} of the {nq * nk:,} "
            "(query, key) pairs per head (its cost())"
        )
    elif causal or "mask" in call.kwargs:
        score_note += f", counted dense as attention={kernel.name!r} computes them"
    if cross:
        mix = "each query's output mixes the context tokens' values"
    elif causal:
        mix = "each token's output mixes the values of the tokens it may see"
    else:
        mix = "each token's output mixes every token's value"
    subs = [
        *_projection_rows(ex, mha, call, k, block, lq, lk if cross else None),
        # The kernel's own parameters (additive scores), if any, are the scores' parameters.
        ExplainRow(score_step, k.q, scores, f"H x {lq} x Dh", f"H x {lq} x {lk}",
                   param_count(mha.kernel), score_flops, block, 1, score_note),
        *_layer_bias_rows(mha, scores, block, lq, lk),
        ExplainRow("softmax", scores, scores, f"H x {lq} x {lk}", f"H x {lq} x {lk}", 0,
                   FLOPS_PER_ELEMENT["softmax"] * n_scores, block, 1,
                   "alpha = softmax(A) over each row (the keys), in float32"),
        ExplainRow("weighted sum alpha V", scores, k.out, f"H x {lq} x {lk}", f"H x {lq} x Dh",
                   0, 2 * n_scores * dv, block, 1, f"Z = alpha V: {mix}"),
        ExplainRow("concat heads", k.out, merged, f"H x {lq} x Dh", f"{lq} x D", 0, 0, block, 1,
                   "Concat(head_1, ..., head_H): H x Dh = D"),
        ExplainRow("W_O", merged, out, f"{lq} x D", f"{lq} x D", param_count(mha.out_proj),
                   linear_flops(mha.out_proj, merged), block, 1),
    ]  # fmt: skip
    params = ex.claim(f"block {block} {step}", mha)
    if params != sum(r.params for r in subs):
        raise RuntimeError(
            f"{step} has {params} parameters but its sub-steps claim "
            f"{sum(r.params for r in subs)}; explain does not know all its layers"
        )
    formula = "CrossAttn(X, M)" if cross else "MHSA(X)"
    note = f"{formula} = Concat(head_1, ..., head_H) W_O with H = {heads} heads of Dh = {dh}"
    if cross:
        note += "; queries from X, keys and values from the context M"
    note += (
        f"; attention={kernel.name!r} holds {cost.score_elements:,} score entries per head at "
        f"once: {_bytes(score_bytes)} for the B x H = {b} x {heads} heads"
    )
    row = ExplainRow(step, x, out, f"{lq} x D", f"{lq} x D", params,
                     sum(r.flops for r in subs), block, note=note,
                     score_bytes=score_bytes)  # fmt: skip
    return [row, *subs]


def _layer_bias_rows(
    mha: nn.Module, scores: tuple[int, ...], block: str, lq: str, lk: str
) -> list[ExplainRow]:
    """The attention's own bias (``mha.bias_provider``: Swin's relative position table), read
    for every (query, key) pair and added to the scores (1 FLOP a score), or no row."""
    provider = mha.bias_provider
    if provider is None:
        return []
    table = getattr(provider, "table", None)
    what = (
        f"a learned {tuple(table.shape)[0]} x H table read at each pair's (row, column) offset "
        f"inside the window, (2Ws-1)^2 = {tuple(table.shape)[0]} offsets"
        if table is not None
        else f"this layer's {type(provider).__name__}"
    )
    return [
        ExplainRow("+ relative position bias", scores, scores, f"H x {lq} x {lk}",
                   f"H x {lq} x {lk}", param_count(provider), math.prod(scores), block, 1,
                   f"B[h, i, j] added to every score: {what} (Swin, eq. 4)"),
    ]  # fmt: skip


def _bytes(n: int) -> str:
    """1_048_576 -> '1.05 MB' (decimal units; bytes below 1 kB)."""
    for factor, unit in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if n >= factor:
            return f"{n / factor:.2f} {unit}"
    return f"{n} B"


def mlp_rows(ex: Explainer, mlp: nn.Module, block: str, step: str, L: str) -> list[ExplainRow]:
    """A FeedForward row and its sub-steps fc1, activation, fc2."""
    t = ex.trace
    call = t.call(mlp)
    x, out = call.inputs[0], call.output
    fc1, fc2 = t.call(mlp.fc1), t.call(mlp.fc2)
    hidden, activated = fc1.output, fc2.inputs[0]
    kind = mlp.activation
    act_flops = FLOPS_PER_ELEMENT[{"swiglu": "silu", "geglu": "gelu"}.get(kind, kind)]
    if mlp.gated:
        act_flops += 1  # the gate's product act(X W) * (X V)
        act_text, wide = f"{kind}: act(X W_gate) * (X W_up)", f"{L} x (2*F)"
    else:
        act_text, wide = "", f"{L} x F"
    subs = [
        ExplainRow("fc1 (D -> F)", x, hidden, f"{L} x D", wide, param_count(mlp.fc1),
                   linear_flops(mlp.fc1, x), block, 1),
        ExplainRow(f"activation ({kind})", hidden, activated, wide, f"{L} x F", 0,
                   act_flops * numel(activated), block, 1, act_text),
        ExplainRow("fc2 (F -> D)", activated, fc2.output, f"{L} x F", f"{L} x D",
                   param_count(mlp.fc2), linear_flops(mlp.fc2, activated), block, 1),
    ]  # fmt: skip
    params = ex.claim(f"block {block} {step}", mlp)
    if params != sum(r.params for r in subs):
        raise RuntimeError("the MLP has parameters explain does not know")
    formula = "gated(X W1 + b1) W2 + b2" if mlp.gated else "act(X W1 + b1) W2 + b2"
    note = (
        f"X2 = {formula} with act = {kind}: D -> F -> D = {x[-1]} -> {activated[-1]} -> {out[-1]}"
    )
    row = ExplainRow(step, x, out, f"{L} x D", f"{L} x D", params, sum(r.flops for r in subs),
                     block, note=note)  # fmt: skip
    return [row, *subs]


def patch_merging_rows(
    ex: Explainer, down: nn.Module, block: str, src: tuple[str, str], dst: tuple[str, str]
) -> list[ExplainRow]:
    """A PatchMerging row and its sub-steps, from ``src`` = (tokens, width) symbols to
    ``dst``: 2 x 2 neighbours concatenated, normalised, projected (Swin's down-sampling)."""
    t = ex.trace
    call, norm = t.call(down), t.call(down.norm)
    x, concat, out = call.inputs[0], norm.inputs[0], call.output
    (n0, d0), (n1, d1) = src, dst
    wide = f"{n1} x (4*{d0})"
    pad = 4 * concat[1] != x[1]
    subs = [
        ExplainRow("concat 2 x 2 neighbours", x, concat, f"{n0} x {d0}", wide, 0, 0, block, 1,
                   "each token of the new grid holds its 2 x 2 group's four D-vectors: "
                   "x[2i, 2j], x[2i+1, 2j], x[2i, 2j+1], x[2i+1, 2j+1]"
                   + ("; an odd grid is padded with zero tokens first" if pad else "")),
        ExplainRow("LN", concat, concat, wide, wide, param_count(down.norm),
                   norm_flops(down.norm, concat), block, 1),
        ExplainRow(f"reduction (4*{d0} -> {d1})", concat, out, wide, f"{n1} x {d1}",
                   param_count(down.reduction), linear_flops(down.reduction, concat), block, 1,
                   "Linear without bias"),
    ]  # fmt: skip
    params = ex.claim(f"block {block} patch merging", down)
    if params != sum(r.params for r in subs):
        raise RuntimeError("the patch merging has parameters explain does not know")
    row = ExplainRow("patch merging", x, out, f"{n0} x {d0}", f"{n1} x {d1}", params,
                     sum(r.flops for r in subs), block,
                     note="down-sampling between stages: a 2 x 2 group of tokens -> one token, "
                     "half the grid's height and width")  # fmt: skip
    return [row, *subs]
