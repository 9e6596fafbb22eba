"""Step-by-step table of a model: input shape, output shape, parameters and FLOPs per step.

``tfam.explain("vit_base_patch16_224")`` walks the model in the order of the seed's ViT
description: patching -> linear projection -> + [CLS] -> + position -> per block (LN, MHSA with
its sub-steps, residual, LN, MLP, residual) -> final LN -> pooling -> pre-logits -> head.

Shapes are not re-derived from formulas: the model runs once on the meta device (tensors
with shapes but no storage, so even ViT-L costs no memory) with forward hooks on its modules
and a recording wrapper around each attention kernel; every shape in the table is one that
the code produced. Each row also carries the shape in the seed's symbols ("(N+1) x D"), and the
two are checked against each other, so the table cannot drift from the code silently.

Parameters are exact: every parameter of the model is claimed by exactly one row, and the
total is checked against ``model.num_parameters()``.

FLOPs are analytic per module type, from the traced shapes, for the whole batch:

- a multiply-add counts as 2 FLOPs: a matmul (m x k) @ (k x n) is 2*m*k*n;
- a bias, residual or position add is 1 FLOP per output element;
- attention: scores Q K^T (2*Lq*Lk*Dh per head), scaling by 1/sqrt(Dh) (1 per score), softmax,
  weighted sum alpha V (2*Lq*Lk*Dh per head), all included;
- element-wise functions cost ``FLOPS_PER_ELEMENT`` FLOPs per element (approximate: an exp or
  erf is counted as one FLOP); reshapes, concatenation, [CLS] pooling and dropout cost 0.

Shape symbols (the seed's): B batch, C channels, H_img x W_img image, P_h x P_w patch,
N patches, D width, H heads, Dh = D / H head width, F = ffn_dim, R = representation_size,
K = num_classes. Image height/width are H_img/W_img because H names the heads.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from tfam.models.base import CONFIG_NAME, MODEL_CLASSES, TfamModel

# Approximate FLOPs per element of the element-wise steps (see the module docstring).
FLOPS_PER_ELEMENT: dict[str, int] = {
    # mean (1 add), centre (1 sub), square (1 mul), variance sum (1 add), normalise (1 mul by
    # the row's 1/std), gamma (1 mul), beta (1 add); the per-row sqrt is not counted.
    "layernorm": 7,
    # square, sum, normalise, gamma.
    "rmsnorm": 4,
    # running max (1), subtract max (1), exp (1), sum (1), divide (1).
    "softmax": 5,
    "relu": 1,
    # 0.5 * x * (1 + erf(x / sqrt 2)), or its tanh form x^3, poly, tanh, add, mul.
    "gelu": 8,
    "gelu_tanh": 8,
    # x * sigmoid(x): negate, exp, add, divide, multiply.
    "silu": 5,
    # (e^x - e^-x) / (e^x + e^-x).
    "tanh": 5,
}

BLOCK_MODES = ("first", "all")


@dataclass(frozen=True)
class ExplainRow:
    """One step of the table.

    ``input_shape``/``output_shape`` are the traced tensor shapes, batch dimension first;
    ``input_symbols``/``output_symbols`` are the same shapes in the seed's symbols, without the
    batch dimension. ``params`` and ``flops`` are exact counts (FLOPs for the whole batch).
    ``level`` 0 rows add up to the totals; ``level`` 1 rows break down the level 0 row above
    them (MHSA, MLP) and are already included in it. ``block`` is the encoder block ("1",
    or "2..12" for the summary row), empty outside the blocks.
    """

    step: str
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    input_symbols: str
    output_symbols: str
    params: int
    flops: int
    block: str = ""
    level: int = 0
    note: str = ""


@dataclass
class ExplainTable:
    """The result of :func:`explain`; ``print(table)`` shows it as aligned text."""

    name: str
    family: str
    config: dict[str, Any]
    batch_size: int
    blocks: str
    symbols: dict[str, int]
    header: list[str]
    rows: list[ExplainRow]
    total_params: int
    total_flops: int
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Everything in plain JSON types (shapes as lists)."""
        rows = []
        for row in self.rows:
            d = asdict(row)
            d["input_shape"] = list(row.input_shape)
            d["output_shape"] = list(row.output_shape)
            rows.append(d)
        return {
            "name": self.name,
            "family": self.family,
            "config": self.config,
            "batch_size": self.batch_size,
            "blocks": self.blocks,
            "symbols": dict(self.symbols),
            "rows": rows,
            "total_params": self.total_params,
            "total_flops": self.total_flops,
            "flop_conventions": {
                "multiply_add": 2,
                "add": 1,
                "scale": 1,
                "per_element": dict(FLOPS_PER_ELEMENT),
            },
            "notes": list(self.notes),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def to_text(self) -> str:
        """Aligned columns; shapes per image when the batch size is 1, with thousands
        separators in the counts."""
        with_batch = self.batch_size != 1

        def shape(s: tuple[int, ...]) -> str:
            return " x ".join(str(v) for v in (s if with_batch else s[1:]))

        def symbols(s: str) -> str:
            return f"B x {s}" if with_batch else s

        head = ("block", "step", "input", "output", "in symbols -> out symbols", "params", "FLOPs")
        body: list[tuple[str, ...]] = []
        note_marks: list[str] = []
        for row in self.rows:
            step = ("  " * row.level) + row.step
            if row.note:
                # Repeated notes (every block's LN, ...) share one footnote.
                if row.note not in note_marks:
                    note_marks.append(row.note)
                step += f" [{note_marks.index(row.note) + 1}]"
            body.append(
                (
                    row.block,
                    step,
                    shape(row.input_shape),
                    shape(row.output_shape),
                    f"{symbols(row.input_symbols)} -> {symbols(row.output_symbols)}",
                    f"{row.params:,}",
                    f"{row.flops:,}",
                )
            )
        total = ("", "total", "", "", "", f"{self.total_params:,}", f"{self.total_flops:,}")
        widths = [max(len(r[i]) for r in [head, total, *body]) for i in range(len(head))]
        right = {5, 6}  # numbers align right

        def line(cells: tuple[str, ...]) -> str:
            out = [
                c.rjust(w) if i in right else c.ljust(w)
                for i, (c, w) in enumerate(zip(cells, widths))
            ]
            return "  ".join(out).rstrip()

        rule = "  ".join("-" * w for w in widths)
        lines = [*self.header, "", line(head), rule]
        lines += [line(r) for r in body]
        lines += [rule, line(total)]
        lines.append(
            f"total: {self.total_params:,} parameters, {_human(self.total_flops)}FLOPs "
            f"for a batch of {self.batch_size} "
            f"({_human(self.total_flops // self.batch_size)}FLOPs per image)"
        )
        if note_marks or self.notes:
            lines.append("")
        for i, note in enumerate(note_marks, start=1):
            lines.append(f"[{i}] {note}")
        lines += self.notes
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()


def _human(n: int) -> str:
    """17_582_000_000 -> '17.58 G' (the caller appends the unit)."""
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= factor:
            return f"{n / factor:.2f} {prefix}"
    return f"{n} "


# ----------------------------------------------------------------------------- model lookup


def _resolve_model(model_or_name: Any, overrides: dict[str, Any]) -> tuple[TfamModel, str]:
    """A model to trace and the name to show. Names and directories are built on the meta
    device: no weights are allocated or loaded, so even the largest preset is instant."""
    from tfam.config import BaseConfig
    from tfam.models.registry import PRESETS, create_model

    if isinstance(model_or_name, TfamModel):
        if overrides:
            raise ValueError(
                f"config overrides {sorted(overrides)} apply to a name or a model directory, "
                f"not to a built model; pass the name, e.g. "
                f"explain('{model_or_name.config.family}', ...), or build the model with them"
            )
        return model_or_name, f"{type(model_or_name).__name__} ({model_or_name.config.family})"
    if not isinstance(model_or_name, str | Path):
        raise ValueError(
            f"model_or_name={model_or_name!r} is invalid: expected a tfam model, a preset or "
            "family name, or a model directory"
        )
    name = str(model_or_name)
    if name in PRESETS or name in MODEL_CLASSES:
        with torch.device("meta"):
            return create_model(name, **overrides), name
    path = Path(name)
    if path.is_dir():
        config_path = path / CONFIG_NAME
        if not config_path.is_file():
            raise FileNotFoundError(
                f"{config_path} not found: a model directory holds {CONFIG_NAME} and "
                "model.safetensors (written by model.save_pretrained or `tfam train`)"
            )
        # The config fixes the architecture; the weights are not needed to explain it.
        config = BaseConfig.from_json(config_path)
        if overrides:
            config = config.replace(**overrides)
        with torch.device("meta"):
            return MODEL_CLASSES[config.family](config), name
    raise ValueError(
        f"model_or_name={name!r} is not a preset, a family or a model directory; "
        f"presets: {', '.join(sorted(PRESETS))}; families: {', '.join(sorted(MODEL_CLASSES))}"
    )


# ----------------------------------------------------------------------------------- tracing


@dataclass
class _Call:
    inputs: list[tuple[int, ...]]
    output: tuple[int, ...]


@dataclass
class _KernelCall:
    q: tuple[int, ...]
    k: tuple[int, ...]
    v: tuple[int, ...]
    out: tuple[int, ...]


def _shape_of(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, Tensor):
        return tuple(value.shape)
    if isinstance(value, tuple | list) and value and isinstance(value[0], Tensor):
        return tuple(value[0].shape)  # (output, attention weights) -> output
    return None


class _Trace:
    """What one meta-device forward recorded: per module its call, per attention its kernel."""

    def __init__(self) -> None:
        self.calls: dict[nn.Module, list[_Call]] = {}
        self.kernels: dict[nn.Module, list[_KernelCall]] = {}

    def call(self, module: nn.Module) -> _Call:
        calls = self.calls.get(module, [])
        if len(calls) != 1:
            raise RuntimeError(
                f"explain expected one call of {type(module).__name__} during the trace, "
                f"saw {len(calls)}"
            )
        return calls[0]

    def kernel(self, module: nn.Module) -> _KernelCall:
        """The kernel call of an attention module (its kernel is a module, hooked like any)."""
        calls = self.calls.get(module.kernel, [])
        if len(calls) != 1:
            raise RuntimeError(f"explain expected one attention kernel call, saw {len(calls)}")
        q, k, v = calls[0].inputs[:3]
        return _KernelCall(q, k, v, calls[0].output)


def _trace(model: TfamModel, example: Tensor) -> _Trace:
    """Run ``model(example)`` on the meta device, recording every module's input and output
    shapes and every attention kernel's Q, K, V and output shapes. The model is left as it was
    (hooks removed, kernels restored, train/eval flags restored, weights untouched)."""
    from torch.func import functional_call

    trace = _Trace()
    handles = []
    training = {m: m.training for m in model.modules()}

    def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        inputs = [tuple(a.shape) for a in args if isinstance(a, Tensor)]
        out = _shape_of(output)
        if out is not None:
            trace.calls.setdefault(module, []).append(_Call(inputs, out))

    try:
        for module in model.modules():
            handles.append(module.register_forward_hook(hook))
        model.eval()  # dropout and drop-path are identities here; they cost nothing anyway
        # return_attention=True runs the whole computation the seed's table describes: every
        # block over every token (a plain ViT forward skips the last block's non-[CLS] rows).
        with torch.no_grad():
            tensors = dict(model.named_parameters())
            tensors.update(model.named_buffers())
            if all(t.device.type == "meta" for t in tensors.values()):
                model(example, return_attention=True)
            else:
                # A real model: swap in storage-less stand-ins for its weights for this call.
                meta = {k: torch.empty_like(t, device="meta") for k, t in tensors.items()}
                functional_call(model, meta, (example,), {"return_attention": True})
    finally:
        for h in handles:
            h.remove()
        for module, flag in training.items():
            module.training = flag
    return trace


# ---------------------------------------------------------------------------- FLOP helpers


def _numel(shape: Iterable[int]) -> int:
    return math.prod(shape)


def _param_count(*items: nn.Module | nn.Parameter | None) -> int:
    n = 0
    for item in items:
        if item is None:
            continue
        if isinstance(item, nn.Module):
            n += sum(p.numel() for p in item.parameters())
        else:
            n += item.numel()
    return n


def _linear_flops(module: nn.Module, in_shape: tuple[int, ...]) -> int:
    """(..., k) @ (k, n) [+ bias]: 2*m*k*n, plus m*n for the bias."""
    if not isinstance(module, nn.Linear):
        raise TypeError(f"explain counts FLOPs of nn.Linear here, not {module!r}")
    m = _numel(in_shape[:-1])
    flops = 2 * m * module.in_features * module.out_features
    if module.bias is not None:
        flops += m * module.out_features
    return flops


def _norm_flops(module: nn.Module, shape: tuple[int, ...]) -> int:
    if isinstance(module, nn.LayerNorm):
        return FLOPS_PER_ELEMENT["layernorm"] * _numel(shape)
    if isinstance(module, nn.RMSNorm):
        return FLOPS_PER_ELEMENT["rmsnorm"] * _numel(shape)
    raise TypeError(f"explain has no FLOP count for the norm {module!r}")


def _is_identity(module: nn.Module | None) -> bool:
    return module is None or isinstance(module, nn.Identity)


_ALLOWED_NODES = (ast.Expression, ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Name, ast.Load)


def _eval_symbols(text: str, env: dict[str, int]) -> tuple[int, ...]:
    """'(N+1) x D' with N=196, D=768 -> (197, 768)."""
    values = []
    for axis in text.split(" x "):
        tree = ast.parse(axis.strip(), mode="eval")
        for node in ast.walk(tree):
            if not isinstance(node, _ALLOWED_NODES) and not (
                isinstance(node, ast.Constant) and isinstance(node.value, int)
            ):
                raise RuntimeError(f"bad shape symbol {axis!r} in {text!r}")
        values.append(int(eval(compile(tree, "<symbols>", "eval"), {"__builtins__": {}}, env)))
    return tuple(values)


# ------------------------------------------------------------------------------------- ViT


class _ViTExplainer:
    """Rows for a ViT, in the order of the seed: embedding, blocks, head."""

    def __init__(self, model: TfamModel, batch_size: int) -> None:
        from tfam.models.vit import ViT

        if not isinstance(model, ViT):
            raise TypeError(f"the vit explainer takes a ViT, got {type(model).__name__}")
        self.model = model
        self.batch = batch_size
        c = model.config
        self.prefix = model.num_prefix_tokens
        self.L = (
            "(N+1)" if self.prefix == 1 else ("N" if self.prefix == 0 else f"(N+{self.prefix})")
        )
        self.env = {
            "C": c.in_channels,
            "H_img": c.image_size[0],
            "W_img": c.image_size[1],
            "P_h": c.patch_size[0],
            "P_w": c.patch_size[1],
            "N": c.num_patches,
            "D": c.dim,
            "H": c.heads,
            "Dh": c.head_dim,
            "F": c.ffn_dim,
            "K": c.num_classes,
            "R": c.representation_size or 0,
        }
        example = torch.empty(batch_size, c.in_channels, *c.image_size, device="meta")
        self.trace = _trace(model, example)
        self.claimed: dict[int, str] = {}

    # Every parameter belongs to exactly one level-0 row; claiming twice is a bug here.
    def claim(self, step: str, *items: nn.Module | nn.Parameter | None) -> int:
        for item in items:
            if item is None:
                continue
            params = item.parameters() if isinstance(item, nn.Module) else [item]
            for p in params:
                if id(p) in self.claimed:
                    raise RuntimeError(f"parameter counted twice: {step} and {self.claimed[id(p)]}")
                self.claimed[id(p)] = step
        return _param_count(*items)

    def embedding_rows(self) -> list[ExplainRow]:
        m, c, t, L = self.model, self.model.config, self.trace, self.L
        pe = m.patch_embed
        image = t.call(pe).inputs[0]
        grid = t.call(pe.proj).output  # (B, D, gh, gw): the strided convolution's output
        d_out, c_in, kh, kw = pe.proj.weight.shape
        patch_dim = c_in * kh * kw
        patches = (image[0], grid[2] * grid[3], patch_dim)
        projected = t.call(pe).output
        tokens = t.call(m.pos_drop).inputs[0]  # after [CLS] and position
        gh, gw = grid[2], grid[3]
        rows = [
            ExplainRow(
                "patching",
                image,
                patches,
                "C x H_img x W_img",
                "N x (P_h*P_w*C)",
                0,
                0,
                note=(
                    f"N = (H_img/P_h)*(W_img/P_w) = {gh}*{gw} = {gh * gw} patches, each "
                    f"flattened to P_h*P_w*C = {kh}*{kw}*{c_in} = {patch_dim} values "
                    "(row-major over the grid; runs fused with the projection as a "
                    "strided convolution)"
                ),
            ),
            ExplainRow(
                "linear projection",
                patches,
                projected,
                "N x (P_h*P_w*C)",
                "N x D",
                self.claim("linear projection", pe),
                2 * _numel(patches) * d_out + _numel(projected),
            ),
        ]
        if m.pos_table is not None:
            n = gh * gw
            rows.append(
                ExplainRow(
                    "+ position",
                    projected,
                    projected,
                    "N x D",
                    "N x D",
                    0,
                    _numel(projected),
                    note=(
                        f"add the fixed 2-D sine-cosine table ({n} x D, nothing learned) to the "
                        "patch tokens: rows in the first D/2 features, columns in the last"
                    ),
                )
            )
        if m.cls_token is not None:
            rows.append(
                ExplainRow(
                    "+ [CLS]",
                    projected,
                    tokens,
                    "N x D",
                    f"{L} x D",
                    self.claim("+ [CLS]", m.cls_token),
                    0,
                    note="prepend the learned [CLS] token: one D-vector shared by every image",
                )
            )
        if m.pos_embed is not None:
            rows.append(
                ExplainRow(
                    "+ position",
                    tokens,
                    tokens,
                    f"{L} x D",
                    f"{L} x D",
                    self.claim("+ position", m.pos_embed),
                    _numel(tokens),
                    note=(
                        f"add the learned position table ({L} x D = "
                        f"{' x '.join(map(str, m.pos_embed.shape[1:]))})"
                    ),
                )
            )
        elif c.position not in ("none", "sincos2d"):
            raise ValueError(f"explain does not know position={c.position!r}")
        return rows

    def mhsa_rows(self, block: str, mhsa: nn.Module, step: str) -> list[ExplainRow]:
        t, L = self.trace, self.L
        call, k = t.call(mhsa), t.kernel(mhsa)
        x = call.inputs[0]
        b, heads, lq, dh = k.q
        lk, dv = k.k[2], k.v[3]
        if k.q != k.k or k.k[:3] != k.v[:3]:
            raise RuntimeError(f"self-attention expected equal Q, K, V shapes, got {k}")
        per_head = (b, 3, heads, lq, dh)
        if mhsa.fused_qkv:
            qkv_params = _param_count(mhsa.qkv)
            qkv_flops = _linear_flops(mhsa.qkv, t.call(mhsa.qkv).inputs[0])
            qkv_note = "one fused (D x 3D) matmul"
        else:
            projs = (mhsa.q_proj, mhsa.k_proj, mhsa.v_proj)
            qkv_params = _param_count(*projs)
            qkv_flops = sum(_linear_flops(p, t.call(p).inputs[0]) for p in projs)
            qkv_note = "W_Q, W_K, W_V: three (D x D) matmuls"
        scores = (b, heads, lq, lk)
        n_scores = _numel(scores)
        merged = t.call(mhsa.out_proj).inputs[0]
        out = call.output
        scale = 1 / math.sqrt(dh)
        subs = [
            ExplainRow(
                "Q, K, V projections",
                x,
                per_head,
                f"{L} x D",
                f"3 x H x {L} x Dh",
                qkv_params,
                qkv_flops,
                block,
                1,
                f"Q = X W_Q, K = X W_K, V = X W_V ({qkv_note}), then split into H heads of Dh",
            ),
            ExplainRow(
                "scores Q K^T / sqrt(Dh)",
                k.q,
                scores,
                f"H x {L} x Dh",
                f"H x {L} x {L}",
                0,
                2 * n_scores * dh + n_scores,
                block,
                1,
                f"per head a {L} x {L} = {lq} x {lk} matrix; scaled by 1/sqrt(Dh) = "
                f"1/sqrt({dh}) = {scale:.4g} (the head width, as in every reference "
                "implementation; the seed writes sqrt(D))",
            ),
            ExplainRow(
                "softmax",
                scores,
                scores,
                f"H x {L} x {L}",
                f"H x {L} x {L}",
                0,
                FLOPS_PER_ELEMENT["softmax"] * n_scores,
                block,
                1,
                "alpha = softmax(A) over each row (the keys), in float32",
            ),
            ExplainRow(
                "weighted sum alpha V",
                scores,
                k.out,
                f"H x {L} x {L}",
                f"H x {L} x Dh",
                0,
                2 * n_scores * dv,
                block,
                1,
                "Z = alpha V: each token's output mixes every token's value",
            ),
            ExplainRow(
                "concat heads",
                k.out,
                merged,
                f"H x {L} x Dh",
                f"{L} x D",
                0,
                0,
                block,
                1,
                "Concat(head_1, ..., head_H): H x Dh = D",
            ),
            ExplainRow(
                "W_O",
                merged,
                out,
                f"{L} x D",
                f"{L} x D",
                _param_count(mhsa.out_proj),
                _linear_flops(mhsa.out_proj, merged),
                block,
                1,
            ),
        ]
        params = self.claim(f"block {block} {step}", mhsa)
        if params != sum(r.params for r in subs):
            raise RuntimeError(
                f"MHSA has {params} parameters but its sub-steps claim "
                f"{sum(r.params for r in subs)}; explain does not know all its layers"
            )
        row = ExplainRow(
            step,
            x,
            out,
            f"{L} x D",
            f"{L} x D",
            params,
            sum(r.flops for r in subs),
            block,
            note=f"MHSA(X) = Concat(head_1, ..., head_H) W_O with H = {heads} heads of Dh = {dh}",
        )
        return [row, *subs]

    def mlp_rows(self, block: str, mlp: nn.Module, step: str) -> list[ExplainRow]:
        t, L = self.trace, self.L
        call = t.call(mlp)
        x, out = call.inputs[0], call.output
        fc1, fc2 = t.call(mlp.fc1), t.call(mlp.fc2)
        hidden, activated = fc1.output, fc2.inputs[0]
        kind = mlp.activation
        act_flops = FLOPS_PER_ELEMENT[{"swiglu": "silu", "geglu": "gelu"}.get(kind, kind)]
        if mlp.gated:
            act_flops += 1  # the gate's product act(X W) * (X V)
            act_text = f"{kind}: act(X W_gate) * (X W_up)"
            wide = f"{L} x (2*F)"
        else:
            act_text = kind
            wide = f"{L} x F"
        subs = [
            ExplainRow(
                "fc1 (D -> F)",
                x,
                hidden,
                f"{L} x D",
                wide,
                _param_count(mlp.fc1),
                _linear_flops(mlp.fc1, x),
                block,
                1,
            ),
            ExplainRow(
                f"activation ({kind})",
                hidden,
                activated,
                wide,
                f"{L} x F",
                0,
                act_flops * _numel(activated),
                block,
                1,
                act_text if mlp.gated else "",
            ),
            ExplainRow(
                "fc2 (F -> D)",
                activated,
                fc2.output,
                f"{L} x F",
                f"{L} x D",
                _param_count(mlp.fc2),
                _linear_flops(mlp.fc2, activated),
                block,
                1,
            ),
        ]
        params = self.claim(f"block {block} {step}", mlp)
        if params != sum(r.params for r in subs):
            raise RuntimeError("the MLP has parameters explain does not know")
        row = ExplainRow(
            step,
            x,
            out,
            f"{L} x D",
            f"{L} x D",
            params,
            sum(r.flops for r in subs),
            block,
            note=(
                (
                    "X2 = act(X W1 + b1) W2 + b2"
                    if not mlp.gated
                    else "X2 = gated(X W1 + b1) W2 + b2"
                )
                + f" with act = {kind}: D -> F -> D = {x[-1]} -> {activated[-1]} -> {out[-1]}"
            ),
        )
        return [row, *subs]

    def norm_row(self, block: str, norm: nn.Module, step: str) -> ExplainRow:
        call = self.trace.call(norm)
        kind = "RMSNorm" if isinstance(norm, nn.RMSNorm) else "LayerNorm"
        return ExplainRow(
            step,
            call.inputs[0],
            call.output,
            f"{self.L} x D",
            f"{self.L} x D",
            self.claim(f"block {block} {step}", norm),
            _norm_flops(norm, call.output),
            block,
            note=f"{kind} of each token over its D features (not over the batch)",
        )

    def residual_row(
        self, block: str, branch: tuple[int, ...], out: tuple[int, ...], formula: str
    ) -> ExplainRow:
        return ExplainRow(
            "residual",
            branch,
            out,
            f"{self.L} x D",
            f"{self.L} x D",
            0,
            _numel(out),
            block,
            note=formula,
        )

    def block_rows(self, index: int, blk: nn.Module) -> list[ExplainRow]:
        t, b = self.trace, str(index)
        mhsa_out = t.call(blk.mhsa).output
        mlp_out = t.call(blk.mlp).output
        if blk.norm_first:  # X1 = X0 + MHSA(LN(X0)); X_out = X1 + MLP(LN(X1))
            return [
                self.norm_row(b, blk.norm1, "LN"),
                *self.mhsa_rows(b, blk.mhsa, "MHSA"),
                self.residual_row(
                    b, mhsa_out, t.call(blk.norm2).inputs[0], "X1 = X0 + MHSA(LN(X0))"
                ),
                self.norm_row(b, blk.norm2, "LN"),
                *self.mlp_rows(b, blk.mlp, "MLP"),
                self.residual_row(b, mlp_out, t.call(blk).output, "X_out = X1 + MLP(LN(X1))"),
            ]
        # post-norm (original Transformer): X1 = LN(X0 + MHSA(X0)); X_out = LN(X1 + MLP(X1))
        return [
            *self.mhsa_rows(b, blk.mhsa, "MHSA"),
            self.residual_row(
                b, mhsa_out, t.call(blk.norm1).inputs[0], "X0 + MHSA(X0), normalised next"
            ),
            self.norm_row(b, blk.norm1, "LN"),
            *self.mlp_rows(b, blk.mlp, "MLP"),
            self.residual_row(
                b, mlp_out, t.call(blk.norm2).inputs[0], "X1 + MLP(X1), normalised next"
            ),
            self.norm_row(b, blk.norm2, "LN"),
        ]

    def head_rows(self) -> list[ExplainRow]:
        m, c, t, L = self.model, self.model.config, self.trace, self.L
        rows = []
        tokens = t.call(m.norm).output  # the hook fires on nn.Identity too
        if not _is_identity(m.norm):
            row = self.norm_row("", m.norm, "final LN")
            rows.append(dataclasses.replace(row, note="the encoder's output norm, per token"))
        pooled = t.call(m.pre_logits).inputs[0]
        if c.pool == "cls":
            pool_step, pool_flops, pool_note = "pooling ([CLS] token)", 0, "keep token 0"
        else:
            n = tokens[1] - self.prefix
            pool_step = "pooling (mean of patches)"
            pool_flops = _numel(pooled) * n  # n - 1 adds and a divide per feature
            pool_note = "average the N patch tokens"
        rows.append(
            ExplainRow(pool_step, tokens, pooled, f"{L} x D", "D", 0, pool_flops, note=pool_note)
        )
        features = t.call(m.pre_logits).output
        if not _is_identity(m.pre_logits):
            linear = m.pre_logits[0]
            rows.append(
                ExplainRow(
                    "pre-logits (Linear + tanh)",
                    pooled,
                    features,
                    "D",
                    "R",
                    self.claim("pre-logits", m.pre_logits),
                    _linear_flops(linear, pooled) + FLOPS_PER_ELEMENT["tanh"] * _numel(features),
                    note="the ViT paper's representation layer: tanh(x W + b), D -> R",
                )
            )
        if not _is_identity(m.head):
            logits = t.call(m.head).output
            rows.append(
                ExplainRow(
                    "head",
                    features,
                    logits,
                    "R" if c.representation_size else "D",
                    "K",
                    self.claim("head", m.head),
                    _linear_flops(m.head, features),
                    note=f"Linear to K = {c.num_classes} class logits",
                )
            )
        return rows

    def check_symbols(self, rows: list[ExplainRow]) -> None:
        """Each traced shape must equal its symbols evaluated with the config's values."""
        for row in rows:
            for shape, text in ((row.input_shape, row.input_symbols),
                                (row.output_shape, row.output_symbols)):  # fmt: skip
                expected = _eval_symbols(text, self.env)
                if tuple(shape[1:]) != expected:
                    raise RuntimeError(
                        f"explain: step {row.step!r} traced shape {shape[1:]} but its symbols "
                        f"{text!r} give {expected}; the table and the model disagree"
                    )

    def header(self, name: str) -> list[str]:
        c, e = self.model.config, self.env
        gh, gw = c.grid_size
        pieces = [
            f"{name}: ViT, batch size {self.batch}"
            + (" (shapes below are per image)" if self.batch == 1 else ""),
            f"image C x H_img x W_img = {e['C']} x {e['H_img']} x {e['W_img']}, "
            f"patch P_h x P_w = {e['P_h']} x {e['P_w']} -> N = {gh} x {gw} = {e['N']} patches "
            f"of dimension P_h*P_w*C = {c.patch_dim}",
            f"D = {e['D']}, {c.depth} block{'' if c.depth == 1 else 's'} ({'pre' if c.norm_first else 'post'}-norm), "
            f"H = {e['H']} heads of Dh = {e['Dh']}, F = ffn_dim = {e['F']} ({c.activation}), "
            + (f"[CLS] + N = {e['N'] + 1} tokens" if self.prefix else f"N = {e['N']} tokens")
            + f", position: {c.position}, pool: {c.pool}"
            + (f", R = {e['R']}" if c.representation_size else "")
            + (f", K = {e['K']} classes" if c.num_classes else ", no head (K = 0)"),
        ]
        return pieces


_EXPLAINERS = {"vit": _ViTExplainer}


def explain(
    model_or_name: TfamModel | str | Path,
    batch_size: int = 1,
    blocks: str = "first",
    **overrides: Any,
) -> ExplainTable:
    """Step-by-step table of a model: per step its input and output shape, parameters, FLOPs.

    ``model_or_name``: a built model, a preset or family name (``"vit_base_patch16_224"``,
    ``"vit"``) with config fields as ``overrides``, or a model directory from
    ``save_pretrained``. Names and directories are built on the meta device (instant, no
    memory); a built model is traced with storage-less stand-ins for its weights and is left
    unchanged. ``batch_size`` B scales the FLOPs and leads every shape. ``blocks='first'`` shows
    block 1 in full and one summary row for blocks 2..N; ``'all'`` lists every block.

    Raises ``ValueError`` for unknown names, bad overrides or bad arguments.
    """
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} is invalid: expected a positive int")
    if blocks not in BLOCK_MODES:
        raise ValueError(f"blocks={blocks!r} is invalid: expected one of {BLOCK_MODES}")
    model, name = _resolve_model(model_or_name, overrides)
    family = model.config.family
    if family not in _EXPLAINERS:
        raise ValueError(
            f"explain does not know the family {family!r} yet; it knows {sorted(_EXPLAINERS)}"
        )
    ex = _EXPLAINERS[family](model, batch_size)
    before = ex.embedding_rows()
    per_block = [ex.block_rows(i, blk) for i, blk in enumerate(model.blocks, start=1)]
    after = ex.head_rows()
    every = before + [r for rows in per_block for r in rows] + after
    ex.check_symbols(every)

    total_params = sum(r.params for r in every if r.level == 0)
    total_flops = sum(r.flops for r in every if r.level == 0)
    real = model.num_parameters()
    if total_params != real or len(ex.claimed) != len(dict.fromkeys(map(id, model.parameters()))):
        unclaimed = [n for n, p in model.named_parameters() if id(p) not in ex.claimed]
        raise RuntimeError(
            f"explain counted {total_params:,} parameters but the model has {real:,}; "
            f"not in any step: {unclaimed}"
        )

    rows = list(before)
    if blocks == "all" or len(per_block) <= 1:
        for block in per_block:
            rows += block
    else:
        rows += per_block[0]
        rows.append(_summary_row(per_block))
    rows += after
    # Both views add up to the same totals.
    assert sum(r.params for r in rows if r.level == 0) == total_params
    assert sum(r.flops for r in rows if r.level == 0) == total_flops
    return ExplainTable(
        name=name,
        family=family,
        config=model.config.to_dict(),
        batch_size=batch_size,
        blocks=blocks,
        symbols=dict(ex.env),
        header=ex.header(name),
        rows=rows,
        total_params=total_params,
        total_flops=total_flops,
        notes=[
            "FLOPs: a multiply-add = 2 FLOPs (matmul 2*m*k*n); bias, residual and position "
            "adds 1 per element; per element "
            + ", ".join(f"{k} {v}" for k, v in FLOPS_PER_ELEMENT.items())
            + "; reshapes, [CLS] and dropout 0.",
        ],
    )


def _summary_row(per_block: list[list[ExplainRow]]) -> ExplainRow:
    """One row standing for blocks 2..N, with their exact parameter and FLOP sums."""

    def signature(rows: list[ExplainRow]) -> list[tuple[Any, ...]]:
        return [(r.step, r.input_shape, r.output_shape, r.params, r.flops, r.level) for r in rows]

    rest = per_block[1:]
    first = signature(per_block[0])
    same = all(signature(rows) == first for rows in rest)
    span = f"2..{len(per_block)}"
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


__all__ = ["FLOPS_PER_ELEMENT", "ExplainRow", "ExplainTable", "explain"]
