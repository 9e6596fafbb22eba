"""Study ``flash``: FlashAttention's advantage (``004_*`` question 10), measured with tfam's
exact tiled kernel ``chunked`` against ``math`` (the formula, every score written) and ``sdpa``
(torch's fused kernel).

It calls the complexity lab (:mod:`tfam.bench.attention`: each point a fresh child process, its
time and peak memory, the memory estimate from the kernel's ``cost()``) once per seed, and adds
what is new here: means ± standard deviations over the repeated sweeps, the bytes of score
matrix that ``chunked`` never writes (from ``cost()``: ``math`` holds Lq x Lk scores per head,
``chunked`` one block_q x block_k tile) and a conclusion computed from the numbers. The tiny
profile measures in this process (no child; its peak memory is then only indicative).
"""

from __future__ import annotations

import dataclasses

from tfam.bench.attention import BenchSpec, Point, add_slopes, run_point, run_sweep
from tfam.layers.kernels import build_kernel
from tfam.studies.base import Context, Profile, Section, Study, md_table, register_study
from tfam.studies.common import machine
from tfam.studies.stats import compare, summarize

__all__ = ["FlashStudy", "score_bytes"]

KERNELS = ("math", "sdpa", "chunked")


def score_bytes(kernel: str, length: int, spec: BenchSpec) -> int:
    """Score entries the kernel holds at once (its ``cost().score_elements``, one head) x B·H,
    in float32 (softmax's precision)."""
    cost = build_kernel(kernel).cost(length, length, spec.head_dim, is_causal=spec.causal)
    return cost.score_elements * 4 * spec.batch * spec.heads


def _in_process(spec: BenchSpec, kernel: str, length: int, estimate_mb: float) -> Point:
    """One point measured in this process (the tiny profile: no child's start-up)."""
    import torch

    from tfam.bench.child import measure

    before = torch.get_num_threads()
    torch.set_num_threads(spec.threads)
    try:
        req = {**dataclasses.asdict(spec), "kernel": kernel, "length": length}
        r = measure(build_kernel(kernel), req)
    finally:
        torch.set_num_threads(before)
    return Point(kernel, length, r["status"], estimate_mb, r["ms"], r["peak_mb"], r["calls"])


def _where(device: str) -> str:
    return "CPU, one thread" if device == "cpu" else f"{device}, one CPU thread"


def _device_note(device: str) -> str:
    """What the device means for the claim (FlashAttention's speed is a GPU's)."""
    if device != "cpu":
        return (
            f"On {device}, `sdpa` is torch's fused kernel (FlashAttention or memory-efficient "
            "attention where the shapes allow) and `chunked` the same tiling in plain PyTorch "
            "operations, each tile a round trip through GPU memory: the speed of tiles kept in "
            "on-chip memory is `sdpa`'s."
        )
    import torch

    gpu = ("no GPU is visible to torch on this machine" if not torch.cuda.is_available()
           else "rerun with --device cuda for the GPU rows")  # fmt: skip
    return (
        "FlashAttention's speed comes from keeping tiles in a GPU's on-chip memory; on this "
        "CPU, `chunked` is plain PyTorch tiles, so only its memory claim is tested here "
        f"(no GPU was used: {gpu})."
    )


def _fmt_mb(b: float) -> str:
    return f"{b / 1e6:.3f}" if b < 1e6 else f"{b / 1e6:.1f}"


@register_study
class FlashStudy(Study):
    name = "flash"
    title = "FlashAttention's advantage: chunked against math and sdpa"
    claim = (
        "004_* question 10 asks what FlashAttention's advantage is: exact attention computed "
        "in tiles never writes the L x L score matrix, so its memory grows linearly with the "
        "length instead of quadratically, at the same result."
    )
    questions = (
        "004_* question 10 (FlashAttention's advantage)",
        "004_* question 3 (the cost of self-attention and how to reduce it)",
        "study 9 flash",
    )
    default_seeds = 3
    profiles = {
        "tiny": Profile(
            dict(
                lengths=[64, 128],
                passes=["forward"],
                heads=1,
                head_dim=64,
                repeat=2,
                time_budget=30.0,
                in_process=True,
            ),  # fmt: skip
            expected="~3 s",
            measured="0.7 s (2-core CPU shared with other jobs)",
            cuda={},  # the same points on a GPU: a smoke test of the CUDA path
            cuda_expected="~seconds",
        ),
        "quick": Profile(
            dict(
                lengths=[512, 1024, 2048, 4096],
                passes=["forward+backward"],
                heads=1,
                head_dim=64,
                repeat=3,
                time_budget=60.0,
                in_process=False,
            ),  # fmt: skip
            expected="~5 min",
            measured="167 s (2-core CPU shared with other jobs)",
        ),
        "full": Profile(
            dict(
                lengths=[1024, 2048, 4096, 8192, 16384],
                passes=["forward", "forward+backward"],
                heads=4,
                head_dim=64,
                repeat=5,
                time_budget=300.0,
                in_process=False,
            ),  # fmt: skip
            expected="~1 h (not measured)",
            # On a GPU (--device cuda): twice the longest length; the sweep skips a point whose
            # cost() estimate exceeds the device's free memory.
            cuda=dict(lengths=[1024, 2048, 4096, 8192, 16384, 32768], time_budget=120.0),
            cuda_expected="~5 min on one GPU (not measured)",
        ),
    }

    def setup(self, ctx: Context) -> str:
        s = ctx.settings
        where = "in this process" if s["in_process"] else "each in a fresh child process"
        return (
            f"`tfam bench attention`'s sweep (kernels {', '.join(KERNELS)}; B=1, H={s['heads']}, "
            f"Dh={s['head_dim']}, float32, {_where(ctx.device)}; lengths {s['lengths']}; "
            f"{', '.join(s['passes'])}), each point {where}, its time the median of "
            f"{s['repeat']} calls; the sweep repeated once per seed. `chunked` runs 512 x 512 "
            f"tiles (its defaults). Machine: {machine(ctx.device)}"
            + (
                "; the 2 cores are shared with other work, so times carry that noise (the "
                "standard deviations show it)."
                if ctx.device == "cpu"
                else "."
            )
        )

    def _spec(self, ctx: Context, passname: str) -> BenchSpec:
        s = ctx.settings
        return BenchSpec(kernels=KERNELS, lengths=tuple(s["lengths"]), heads=s["heads"],
                         head_dim=s["head_dim"], backward=passname == "forward+backward",
                         repeat=s["repeat"], time_budget=s["time_budget"], threads=1,
                         device=ctx.device)  # fmt: skip

    def measure(self, ctx: Context) -> None:
        s = ctx.settings
        point_of = _in_process if s["in_process"] else run_point
        total = len(s["passes"]) * len(ctx.seeds) * len(KERNELS) * len(s["lengths"])
        with ctx.progress.bar(total, "flash: points") as step:
            for passname in s["passes"]:
                spec = self._spec(ctx, passname)
                for seed in ctx.seeds:

                    def launch(spec: BenchSpec, k: str, n: int, est: float, seed: int = seed,
                               passname: str = passname) -> Point:  # fmt: skip
                        key = f"{passname}/seed{seed}/{k}/{n}"
                        rec = ctx.once(key, lambda: dataclasses.asdict(point_of(spec, k, n, est)))
                        step(f"{passname} {k} L={n} seed {seed}")
                        return Point(**{f.name: rec[f.name] for f in dataclasses.fields(Point)})

                    run_sweep(spec, launch=launch)

    def report(self, ctx: Context) -> tuple[list[Section], list[str]]:
        from tfam.viz.complexity import plot_complexity

        s = ctx.settings
        sections: list[Section] = []
        conclusions: list[str] = []
        for passname in s["passes"]:
            spec = self._spec(ctx, passname)
            ms: dict[tuple[str, int], list[float]] = {}
            mb: dict[tuple[str, int], list[float]] = {}
            status: dict[tuple[str, int], str] = {}
            for seed in ctx.seeds:
                for k in KERNELS:
                    for n in s["lengths"]:
                        rec = ctx.store.get(f"{passname}/seed{seed}/{k}/{n}")
                        if rec is None:
                            continue
                        if rec["status"] == "ok":
                            ms.setdefault((k, n), []).append(rec["ms"])
                            mb.setdefault((k, n), []).append(rec["peak_mb"])
                        else:
                            status[(k, n)] = rec["status"]
            rows, mean_points = [], []
            for k in KERNELS:
                for n in s["lengths"]:
                    held = score_bytes(k, n, spec)
                    never = max(0, n * n * 4 * spec.batch * spec.heads - held)
                    if (k, n) in ms:
                        t, m = summarize(ms[(k, n)]), summarize(mb[(k, n)])
                        mean_points.append(Point(k, n, "ok", 0.0, t.mean, m.mean, 1))
                        cells = [t.format(2), m.format(1)]
                    else:
                        why = status.get((k, n), "not run")
                        mean_points.append(Point(k, n, why, 0.0))
                        cells = [why, "-"]
                    rows.append([k, n, *cells, _fmt_mb(held), _fmt_mb(never)])
            add_slopes(mean_points)
            slope = {(p.kernel, p.length): p.mb_slope for p in mean_points}
            png = ctx.figure(f"flash_{passname.replace('+', '_')}.png")
            plot_complexity(mean_points, png, f"attention {passname}: B=1, H={spec.heads}, "
                            f"Dh={spec.head_dim}, float32, {ctx.device} (means over seeds)")  # fmt: skip
            sections.append(Section(
                f"{passname}: time and memory against length",
                md_table(["kernel", "L", "ms", "peak MB", "scores held (MB)",
                          "score matrix never written (MB)"], rows)
                + "\n\n'scores held': the kernel's `cost().score_elements` x B·H x 4 bytes "
                "(math: the whole L x L matrix; chunked: one tile; sdpa: torch's fused kernel, "
                "which its cost() counts as dense); 'never written': L² x 4 x B·H minus that."
                f"\n\n![{passname}]({png.name})",
            ))  # fmt: skip
            longest = max((n for (k, n) in ms if k == "math"), default=None)
            if longest is not None and ("chunked", longest) in mb:
                c = compare(mb[("math", longest)], mb[("chunked", longest)])
                sm, sc = slope.get(("math", longest)), slope.get(("chunked", longest))
                slopes = (
                    f"; memory slope d log MB / d log L up to L={longest}: math "
                    f"{sm:.2f}, chunked {sc:.2f}"
                    if sm is not None and sc is not None
                    else ""
                )
                conclusions.append(
                    f"{passname}, peak memory at L={longest}: "
                    + c.describe("math", "chunked", digits=1, unit="MB")
                    + f"{slopes}; chunked never writes "
                    f"{_fmt_mb(longest * longest * 4 * spec.heads - score_bytes('chunked', longest, spec))} "
                    "MB of scores there."
                )
                if ("sdpa", longest) in mb:
                    m = compare(mb[("sdpa", longest)], mb[("chunked", longest)])
                    conclusions.append(
                        f"{passname}, peak memory at L={longest}, sdpa against chunked: "
                        + m.describe("sdpa", "chunked", digits=1, unit="MB")
                        + " (torch's CPU sdpa is itself a fused, tiled kernel; its cost() "
                        "counts it as dense)."
                    )
                for other in ("math", "sdpa"):
                    if (other, longest) in ms:
                        t = compare(ms[("chunked", longest)], ms[(other, longest)])
                        conclusions.append(
                            f"{passname}, time at L={longest}: "
                            + t.describe("chunked", other, digits=2, unit="ms")
                            + "."
                        )
        conclusions.append(_device_note(ctx.device))
        return sections, conclusions
