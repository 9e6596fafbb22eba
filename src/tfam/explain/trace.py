"""One forward on the meta device, recording every module's input and output shapes; the
exact counts (parameters, FLOPs of a Linear or a norm) that rows are made of."""

from __future__ import annotations

import ast
import copy
import math
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from tfam.explain.table import FLOPS_PER_ELEMENT
from tfam.layers.kernels import AttentionKernel

Shape = tuple[int, ...]


@dataclass
class Call:
    """One call of a module: positional tensor inputs, tensor keyword inputs (``context`` of
    cross-attention), bool keyword flags (``is_causal``) and the output shape."""

    inputs: list[Shape]
    output: Shape
    kwargs: dict[str, Shape] = field(default_factory=dict)
    flags: dict[str, bool] = field(default_factory=dict)


@dataclass
class KernelCall:
    q: Shape
    k: Shape
    v: Shape
    out: Shape


def _shape_of(value: Any) -> Shape | None:
    if isinstance(value, Tensor):
        return tuple(value.shape)
    if isinstance(value, tuple | list) and value and isinstance(value[0], Tensor):
        return tuple(value[0].shape)  # (output, attention weights) -> output
    return None


class Trace:
    """What one meta-device forward recorded: per module its calls."""

    def __init__(self) -> None:
        self.calls: dict[nn.Module, list[Call]] = {}

    def call(self, module: nn.Module) -> Call:
        calls = self.calls.get(module, [])
        if len(calls) != 1:
            raise RuntimeError(
                f"explain expected one call of {type(module).__name__} during the trace, "
                f"saw {len(calls)}"
            )
        return calls[0]

    def kernel(self, attention: nn.Module) -> KernelCall:
        """The kernel call of an attention module (its kernel is a module, hooked like any)."""
        calls = self.calls.get(attention.kernel, [])
        if len(calls) != 1:
            raise RuntimeError(f"explain expected one attention kernel call, saw {len(calls)}")
        q, k, v = calls[0].inputs[:3]
        return KernelCall(q, k, v, calls[0].output)


# ------------------------------------------------------------------------- sizes too large


def _overflow_error(
    error: Exception, what: str, culprit: str = "", fields: dict[str, Any] | None = None
) -> ValueError | None:
    """torch's size overflow as a ValueError: what was being built, the shape, and the culprit
    (given, else the int ``fields`` among the shape's large sizes, else its largest size).
    None for any other error."""
    # torch says "Storage size calculation overflowed" (RuntimeError) for a shape whose bytes
    # pass 2**63, "Overflow when unpacking long" (TypeError) for a size past 2**63 itself.
    if not isinstance(error, RuntimeError | TypeError) or "overflow" not in str(error).lower():
        return None
    found = re.search(r"sizes=\[([\d, ]+)\]", str(error))
    sizes = [int(s) for s in found[1].split(",")] if found else []
    # A field is named when its value is one of the shape's large sizes (3D next to D in
    # W_QKV), not a small one that happens to match (heads=1 and a batch of 1).
    fields = {
        k: v
        for k, v in (fields or {}).items()
        if type(v) is int and v in sizes and 64 * v >= max(sizes)
    }
    named = ", ".join(f"{k}={v!r}" for k, v in fields.items())
    biggest = f"the size {max(sizes):,}" if sizes else "a size"
    shape = f"a tensor of shape {' x '.join(map(str, sizes))}" if sizes else "a size past 2**63"
    return ValueError(
        f"too large to explain: {what} needs {shape}, more than one tensor can hold "
        f"(2**63 bytes): {culprit or (named or biggest) + ' too large'}"
    )


@contextmanager
def size_guard(what: str, fields: dict[str, Any] | None = None) -> Iterator[None]:
    """Turn torch's size overflows (a meta tensor too large to describe) into a ValueError
    saying what was being built and which size (naming the config ``fields`` in it)."""
    try:
        yield
    except (RuntimeError, TypeError) as error:
        named = _overflow_error(error, what, fields=fields)
        if named is None:
            raise
        raise named from None


def _describe(
    module: nn.Module, args: tuple[Any, ...], names: dict[nn.Module, str]
) -> tuple[str, str]:
    """What a module was computing when a size overflowed, and the likely culprit."""
    name = names[module]
    shapes = [tuple(a.shape) for a in args if isinstance(a, Tensor)]
    if isinstance(module, AttentionKernel) and len(shapes) >= 2:
        lq, lk = shapes[0][2], shapes[1][2]
        where = name.removesuffix(".kernel")
        what = f"computing the attention scores of {where} ({lq:,} queries x {lk:,} keys per head)"
        return what, f"the sequence of {max(lq, lk):,} tokens too long"
    return f"running {name or 'the model'} ({type(module).__name__} on inputs {shapes})", ""


# ---------------------------------------------------------------------------------- tracing


def meta_copy(module: nn.Module) -> nn.Module:
    """A copy of ``module`` whose parameters and buffers are storage-less meta tensors of the
    same shapes, dtypes and ``requires_grad``; ties are kept (a weight shared by two modules,
    or one module reachable under two names, is one tensor in the copy too). The caller's
    module is not touched: nothing is swapped into it, so even a failed trace cannot leave it
    changed, and no weight is copied (a copy of any size costs no memory)."""
    memo: dict[int, Any] = {}
    for p in module.parameters():
        memo[id(p)] = nn.Parameter(torch.empty_like(p, device="meta"), p.requires_grad)
    for b in module.buffers():
        memo[id(b)] = torch.empty_like(b, device="meta")
    # deepcopy with the memo filled in: every parameter and buffer maps to its meta stand-in
    # (by identity, which keeps ties); the rest of the module (configs, flags) is copied.
    return copy.deepcopy(module, memo)


def trace(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Trace:
    """Run ``module(*args, **kwargs)`` on the meta device, recording every module's calls
    (an attention kernel's are Q, K, V and its output). ``module`` must hold meta tensors only
    (built on the meta device, or :func:`meta_copy`); it is left as it was (hooks removed,
    train/eval flags restored). A tensor too large for torch is a ValueError."""
    result = Trace()
    names = {m: n for n, m in module.named_modules()}
    real = [n for n, t in (*module.named_parameters(), *module.named_buffers()) if not t.is_meta]
    if real:
        raise ValueError(
            f"module={type(module).__name__} is invalid for trace: {real[0]} is not on the meta "
            "device; trace meta_copy(module)"
        )
    running: list[tuple[nn.Module, tuple[Any, ...]]] = []
    training = {m: m.training for m in module.modules()}

    def enter(m: nn.Module, a: tuple[Any, ...]) -> None:
        running.append((m, a))

    def leave(m: nn.Module, a: tuple[Any, ...], kw: dict[str, Any], output: Any) -> None:
        running.pop()
        out = _shape_of(output)
        if out is None:
            return
        result.calls.setdefault(m, []).append(
            Call(
                [tuple(t.shape) for t in a if isinstance(t, Tensor)],
                out,
                {k: tuple(v.shape) for k, v in kw.items() if isinstance(v, Tensor)},
                {k: v for k, v in kw.items() if isinstance(v, bool)},
            )
        )

    handles = []
    try:
        for m in module.modules():
            handles.append(m.register_forward_pre_hook(enter))
            handles.append(m.register_forward_hook(leave, with_kwargs=True))
        module.eval()  # dropout and drop-path are identities here; they cost nothing anyway
        with torch.no_grad():
            try:
                module(*args, **kwargs)
            except (RuntimeError, TypeError) as error:
                named = _overflow_error(error, *_describe(*running[-1], names)) if running else None
                if named is None:
                    raise
                raise named from None
    finally:
        for h in handles:
            h.remove()
        for m, flag in training.items():
            m.training = flag
    return result


# ----------------------------------------------------------------------------------- counts


def numel(shape: Iterable[int]) -> int:
    return math.prod(shape)


def param_count(*items: nn.Module | nn.Parameter | None) -> int:
    n = 0
    for item in items:
        if isinstance(item, nn.Module):
            n += sum(p.numel() for p in item.parameters())
        elif item is not None:
            n += item.numel()
    return n


def matmul_flops(rows: int, k: int, n: int, bias: bool) -> int:
    """(rows, k) @ (k, n) [+ bias]: 2*rows*k*n, plus rows*n for the bias."""
    return 2 * rows * k * n + (rows * n if bias else 0)


def linear_flops(module: nn.Module, in_shape: Shape) -> int:
    if not isinstance(module, nn.Linear):
        raise TypeError(f"explain counts FLOPs of nn.Linear here, not {module!r}")
    rows = numel(in_shape[:-1])
    return matmul_flops(rows, module.in_features, module.out_features, module.bias is not None)


def norm_flops(module: nn.Module, shape: Shape) -> int:
    if isinstance(module, nn.LayerNorm):
        return FLOPS_PER_ELEMENT["layernorm"] * numel(shape)
    if isinstance(module, nn.RMSNorm):
        return FLOPS_PER_ELEMENT["rmsnorm"] * numel(shape)
    if isinstance(module, nn.BatchNorm1d):  # at inference: one scale and shift per feature
        return FLOPS_PER_ELEMENT["batchnorm"] * numel(shape)
    if isinstance(module, nn.Identity):  # norm="none"
        return 0
    raise TypeError(f"explain has no FLOP count for the norm {module!r}")


def is_identity(module: nn.Module | None) -> bool:
    return module is None or isinstance(module, nn.Identity)


_ALLOWED_NODES = (ast.Expression, ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Name, ast.Load)


def eval_symbols(text: str, env: dict[str, int]) -> Shape:
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
