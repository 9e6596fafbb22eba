"""The precision rule (FlashAttention's) for every registered attention kernel: in a low
precision, a kernel's error against a float64 reference stays within 2x torch's own error
(``sdpa``'s) in that precision.

    python benchmarks/bench_precision.py [--device cpu] [--dtypes bfloat16,float16]
        [--lengths 256,1024] [--kernels math,chunked] [--causal] [--backward] [--autocast]
        [--options '{"chunked": {"block_q": 128}}'] [--seed 0] [--threads N]

On a GPU (torch built with CUDA): ``python benchmarks/bench_precision.py --device cuda``, then
the same with ``--backward`` and with ``--causal``. TF32 is left as torch's default (off), so
"math f32" is float32; the header names the device, torch's version and the TF32 settings.

Per kernel (default: every name in ``tfam.layers.kernels.KERNELS``, so kernels registered
later are measured without a change here), dtype and length L: q, k, v (B=2, H=4, L, Dh=64)
of seeded standard-normal entries, rounded to the dtype. Every computation starts from those
rounded values, so an error is the computation's, not the inputs' rounding.

- reference: ``math`` in float64, under the kernel's own pattern (``pattern_mask``) for a
  pattern kernel, and the causal mask with ``--causal`` ("math f64" / "math f64+pattern");
  for an approximate kernel (performer, linear, lsh) its own output in float64 ("own f64"):
  the same instance cast to float64, so the same random features, with the global seed reset
  before each call for kernels that draw per call;
- the kernel in the dtype: its module cast to the dtype (as ``model.to(dtype)`` does), q, k,
  v in the dtype, ``is_causal`` with ``--causal``;
- sdpa in the dtype ("PyTorch's own error"), under the same pattern and causal mask, against
  ``math`` in float64 under that mask; and ``math`` in float32 against the same reference;
- with ``--autocast``, the kernel is called under ``torch.autocast`` to the dtype (as in a
  model trained with ``TrainConfig(precision="bf16")``), its inputs still in the dtype;
- with ``--backward``, the gradients of q, k and v for one cotangent (standard normal, rounded
  to the dtype) too, one row each ("dq", "dk", "dv"), judged by the same rule.

Rule: max |kernel - reference| <= 2 x max |sdpa - reference|. The exit status is 1 when an
exact or pattern kernel breaks it, or raises an error that is not a refusal; approximate
kernels' verdicts are shown ("info") but do not set it. A kernel that refuses the call (a
feature such as causal, or a dtype) is one "refused: <line>" row. An operation the device does
not have for a dtype (float16 on some CPUs) is one "unsupported: <line>" row: when sdpa itself
cannot run there, the row says so and nothing is judged (torch 2.13 runs float16 on the CPU).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys
from collections.abc import Callable

import torch
from torch import Tensor

import tfam  # noqa: F401  (registers every kernel, the plug-ins' too)
from tfam.layers.kernels import KERNELS, AttentionKernel, math_attention, sdpa_attention
from tfam.layers.masks import causal_mask

B, H, DH = 2, 4, 64
RULE = 2.0  # the kernel's error may be at most RULE x sdpa's
F64 = torch.float64
Attend = Callable[[Tensor, Tensor, Tensor], Tensor]


@dataclasses.dataclass
class Row:
    kernel: str
    kind: str  # exact, pattern, approximate
    dtype: str
    length: int
    what: str = "out"  # out, dq, dk, dv
    reference: str = ""
    err_max: float = float("nan")
    err_mean: float = float("nan")
    sdpa_max: float = float("nan")
    sdpa_mean: float = float("nan")
    f32_max: float = float("nan")
    note: str = ""  # a refusal or an error: the whole row
    failed: bool = False  # gates the exit status

    @property
    def ratio(self) -> float:
        return self.err_max / self.sdpa_max if self.sdpa_max > 0 else float("inf")

    def verdict(self) -> str:
        ok = "pass" if self.ratio <= RULE else "FAIL"
        return ok if self.kind != "approximate" else f"{ok} (info)"


def outputs(fn: Attend, qkv: list[Tensor], cotangent: Tensor, backward: bool) -> list[Tensor]:
    """[out] or [out, dq, dk, dv] of ``fn`` on fresh leaves made from ``qkv``."""
    leaves = [t.detach().clone().requires_grad_(backward) for t in qkv]
    out = fn(*leaves)
    if not backward:
        return [out.detach()]
    return [out.detach(), *torch.autograd.grad(out, leaves, cotangent.to(out.dtype))]


def errors(got: list[Tensor], ref: list[Tensor]) -> list[tuple[float, float]]:
    """(max, mean) of |got - ref| for each pair, in float64."""
    out = []
    for g, r in zip(got, ref):
        d = (g.to(F64) - r).abs()
        out.append((d.max().item(), d.mean().item()))
    return out


def one_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:160]


def build(name: str, options: dict, seed: int) -> AttentionKernel:
    torch.manual_seed(seed)  # random features (performer, lsh) drawn at build time
    cls = KERNELS[name]
    return cls(heads=H, head_dim=DH, **options)


def measure(
    name: str,
    kernel: AttentionKernel | str,
    dtype: torch.dtype,
    length: int,
    data: list[Tensor],
    args: argparse.Namespace,
    cache: dict,
) -> list[Row]:
    """The rows of one kernel at one dtype and length. ``data`` is q, k, v and the cotangent in
    float64 on the device; ``cache`` keeps the references and sdpa's errors per mask."""
    kind = KERNELS[name].exactness
    dname = str(dtype).removeprefix("torch.")
    head = Row(name, kind, dname, length)
    if isinstance(kernel, str):  # it could not be built
        return [dataclasses.replace(head, note=f"cannot build: {kernel}", failed=True)]
    low = [t.to(dtype) for t in data]
    rounded = [t.to(F64) for t in low]  # the inputs every computation starts from
    qkv_low, cot = low[:3], low[3]
    device = data[0].device
    pattern = kernel.pattern_mask(length, length, device) if kind == "pattern" else None
    mask = pattern
    if args.causal:
        causal = causal_mask(length, length, device=device)
        mask = causal if mask is None else mask & causal

    def kernel_in(dt: torch.dtype) -> Attend:
        module = copy.deepcopy(kernel).to(device=device, dtype=dt)

        def fn(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            torch.manual_seed(args.seed)  # the same draws in every precision
            # --autocast: as a model trained with TrainConfig(precision=...) calls it.
            with torch.autocast(device.type, dtype=dt, enabled=args.autocast and dt != F64):
                return module(q, k, v, is_causal=args.causal)[0]

        return fn

    # Reference, sdpa's errors and math f32's, once per mask (plain, or a kernel's pattern).
    key = (dname, length, None if pattern is None else name)
    if key not in cache:
        ref = outputs(
            lambda q, k, v: math_attention(q, k, v, mask)[0], rounded[:3], cot, args.backward
        )
        try:
            sdpa = outputs(
                lambda q, k, v: sdpa_attention(q, k, v, pattern, is_causal=args.causal)[0],
                qkv_low, cot, args.backward,
            )  # fmt: skip
            sdpa_err: list | str = errors(sdpa, ref)
        except (RuntimeError, NotImplementedError) as e:
            sdpa_err = one_line(e)
        f32 = outputs(
            lambda q, k, v: math_attention(q, k, v, mask)[0],
            [t.to(torch.float32) for t in rounded[:3]], cot, args.backward,
        )  # fmt: skip
        cache[key] = (ref, sdpa_err, errors(f32, ref))
    ref, sdpa_err, f32_err = cache[key]
    label = "math f64" + ("+pattern" if pattern is not None else "")
    gated = kind != "approximate"
    try:
        if kind == "approximate":
            label = "own f64"
            ref = outputs(kernel_in(F64), rounded[:3], cot.to(F64), args.backward)
        got = outputs(kernel_in(dtype), qkv_low, cot, args.backward)
    except ValueError as e:
        line = one_line(e)
        if "refuses" in line:
            return [dataclasses.replace(head, note=f"refused: {line}")]
        return [dataclasses.replace(head, note=f"error: {line}", failed=gated)]
    except (RuntimeError, NotImplementedError) as e:
        if isinstance(sdpa_err, str):  # the device lacks the dtype's operations
            return [dataclasses.replace(head, note=f"unsupported on {device.type}: {one_line(e)}")]
        return [dataclasses.replace(head, note=f"error: {one_line(e)}", failed=gated)]
    if isinstance(sdpa_err, str):
        return [
            dataclasses.replace(
                head, note=f"sdpa unsupported on {device.type} (nothing judged): {sdpa_err}"
            )
        ]
    rows = []
    for what, (e_max, e_mean), (s_max, s_mean), (m_max, _) in zip(
        ("out", "dq", "dk", "dv"), errors(got, ref), sdpa_err, f32_err
    ):
        row = dataclasses.replace(
            head, what=what, reference=label, err_max=e_max, err_mean=e_mean,
            sdpa_max=s_max, sdpa_mean=s_mean, f32_max=m_max,
        )  # fmt: skip
        row.failed = gated and not row.ratio <= RULE
        rows.append(row)
    return rows


COLUMNS = (
    ("kernel", 12), ("kind", 11), ("reference", 16), ("dtype", 8), ("L", 5), ("of", 3),
    ("max err", 9), ("mean err", 9), ("sdpa max", 9), ("sdpa mean", 9), ("math f32", 9),
    ("ratio", 6), ("verdict", 11),
)  # fmt: skip


NUMERIC = {"L", "max err", "mean err", "sdpa max", "sdpa mean", "math f32", "ratio"}


def line(cells: list[str]) -> str:
    return "  ".join(
        f"{c:>{w}}" if name in NUMERIC else f"{c:<{w}}" for c, (name, w) in zip(cells, COLUMNS)
    ).rstrip()


def print_row(row: Row) -> None:
    cells = [row.kernel, row.kind, row.reference, row.dtype, str(row.length)]
    if row.note:  # a refusal or an error takes the rest of the row
        print(f"{line(cells)}  {row.note}")
        return
    nums = [row.err_max, row.err_mean, row.sdpa_max, row.sdpa_mean, row.f32_max]
    print(line([*cells, row.what, *(f"{x:.2e}" for x in nums), f"{row.ratio:.2f}", row.verdict()]))


def parse_list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--dtypes", default="bfloat16,float16", help="low precisions to judge")
    parser.add_argument("--lengths", default="256,1024", help="sequence lengths L")
    parser.add_argument("--kernels", default="", help="kernel names (default: all registered)")
    parser.add_argument("--causal", action="store_true", help="is_causal=True")
    parser.add_argument("--backward", action="store_true", help="gradients of q, k, v too")
    parser.add_argument(
        "--autocast", action="store_true", help="call the kernel under autocast to the dtype"
    )
    parser.add_argument("--options", default="{}", help='JSON {"kernel": {option: value}}')
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's)")
    args = parser.parse_args(argv)
    names = parse_list(args.kernels) or sorted(KERNELS)
    unknown = [n for n in names if n not in KERNELS]
    if unknown:
        parser.error(f"--kernels: {unknown} unknown; registered: {', '.join(sorted(KERNELS))}")
    dtypes = []
    for d in parse_list(args.dtypes):
        dt = getattr(torch, d, None)
        if not isinstance(dt, torch.dtype) or not dt.is_floating_point or dt == F64:
            parser.error(f"--dtypes: {d!r} is not a low-precision floating dtype of torch")
        dtypes.append(dt)
    lengths = [int(n) for n in parse_list(args.lengths)]
    options = json.loads(args.options)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here")

    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    tf32 = (
        f", TF32 matmul={torch.backends.cuda.matmul.allow_tf32} "
        f"cudnn={torch.backends.cudnn.allow_tf32}"
        if device.type == "cuda"
        else f", {torch.get_num_threads()} threads"
    )
    print(
        f"torch {torch.__version__} on {where}{tf32}; B={B} H={H} Dh={DH} seed={args.seed}"
        f"{', causal' if args.causal else ''}{', forward+backward' if args.backward else ''}"
        f"{', kernels under autocast' if args.autocast else ''}"
    )
    print(
        f"rule: max |kernel - reference| <= {RULE:g} x max |sdpa - math f64| in the same "
        "dtype; inputs rounded to the dtype first; 'math f32': math in float32's max error"
    )
    kernels: dict[str, AttentionKernel | str] = {}
    for name in names:
        try:
            kernels[name] = build(name, options.get(name, {}), args.seed)
        except (ValueError, TypeError) as e:
            kernels[name] = one_line(e)
    print(line([name for name, _ in COLUMNS]))
    rows: list[Row] = []
    for length in lengths:
        gen = torch.Generator().manual_seed(args.seed)
        data = [
            torch.randn(B, H, length, DH, generator=gen, dtype=F64).to(device) for _ in range(4)
        ]
        for dtype in dtypes:
            cache: dict = {}
            for name in names:
                for row in measure(name, kernels[name], dtype, length, data, args, cache):
                    print_row(row)
                    rows.append(row)
                sys.stdout.flush()
    failed = sorted({f"{r.kernel} {r.dtype} L={r.length} {r.what}" for r in rows if r.failed})
    if failed:
        print(f"FAILED (exact or pattern kernels): {'; '.join(failed)}")
        return 1
    print("every exact and pattern kernel keeps to the rule (refusals aside)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
