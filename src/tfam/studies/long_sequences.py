"""Study ``long-sequences``: ``001_*`` says the faster variants of self-attention do worse than
the original Transformer (and ``004_*`` question 6 asks how to design for long sequences). An
LRA-style comparison (Tay et al. 2020) of every attention kernel tfam registers, on ListOps
(generated with LRA's rules), byte-level genre classification of KJV passages, and a
Pathfinder-like image task that tfam generates (not LRA's data).

It calls the long-sequence lab (:func:`tfam.bench.long_sequences.run_point`: the same small
encoder, seed, data order and schedule for every kernel; test accuracy, training steps/s and
peak memory; at ``full`` each point in its own process) once per (task, kernel, seed), and adds
what is new here: the majority-class baseline of each task's test set, the attention scores
each kernel holds (its ``cost()``), means ± standard deviations over seeds, and conclusions
computed with the 2-standard-error rule against the exact reference kernel (``math``, the
formula of the original Transformer).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tfam.bench.long_sequences import TASKS, kernel_options, load_task, run_point
from tfam.bench.long_sequences import Profile as LabProfile
from tfam.studies.base import Context, Profile, Section, Study, md_table, register_study
from tfam.studies.common import machine
from tfam.studies.stats import compare, summarize

__all__ = ["LongSequencesStudy", "lab_profile", "majority_baseline", "scores_held_mb"]

REFERENCE = "math"  # the original Transformer's attention, softmax(QK^T / sqrt(Dh)) V


def lab_profile(name: str, s: dict[str, Any]) -> LabProfile:
    """The lab's :class:`~tfam.bench.long_sequences.Profile` from a study's settings."""
    fields = {f.name for f in dataclasses.fields(LabProfile)}
    kw = {k: tuple(v) if isinstance(v, list) else v for k, v in s.items() if k in fields}
    return LabProfile(name=name, **kw)


def majority_baseline(task: str, p: LabProfile) -> dict[str, Any]:
    """The test set's size, classes and the accuracy of always answering its most frequent
    label (the bar a model must clear to have learned anything)."""
    test = load_task(task, "test", p, p.test_size)
    counts = test.labels.bincount(minlength=test.num_labels)
    return {
        "test_size": len(test),
        "classes": test.num_labels,
        "majority": float(counts.max()) / max(1, len(test)),
    }


def scores_held_mb(kernel: str, length: int, p: LabProfile) -> float | None:
    """Attention scores the kernel holds at once in one layer's forward (its ``cost()``
    score_elements x B·H x 4 bytes), in MB; None when the kernel cannot be built."""
    from tfam.layers.kernels import build_kernel

    head_dim = p.dim // p.heads
    try:
        k = build_kernel(kernel, kernel_options(kernel, length), heads=p.heads, head_dim=head_dim)
        cost = k.cost(length, length, head_dim)
    except (ValueError, TypeError):
        return None
    return cost.score_elements * 4 * p.batch_size * p.heads / 1e6


def _isolated_point(
    task: str, kernel: str, p: LabProfile, seed: int, device: str = "cpu"
) -> dict[str, Any]:
    """One point in a fresh child process (its own peak memory): the lab's ``_isolated``."""
    from tfam.bench.long_sequences import _isolated

    spec = {"task": task, "kernel": kernel, "profile": dataclasses.asdict(p), "seed": seed,
            "device": device, "threads": 1}  # fmt: skip
    return _isolated(spec, timeout=None)


def _kernels(s: dict[str, Any]) -> list[str]:
    import tfam.layers  # noqa: F401  (registers every kernel)
    from tfam.config import ATTENTION_KERNELS

    return list(s["kernels"]) if s.get("kernels") else list(ATTENTION_KERNELS)


QUICK_KERNELS = ["math", "sdpa", "chunked", "local", "longformer", "block_sparse", "linear",
                 "lsh", "performer"]  # fmt: skip


@register_study
class LongSequencesStudy(Study):
    name = "long-sequences"
    title = "Long sequences: every attention kernel on LRA-style tasks (speed, accuracy, memory)"
    claim = (
        "001_* says the faster variants of self-attention do worse than the original "
        "Transformer's attention; 004_* question 6 asks how to design for long sequences."
    )
    questions = (
        "001_*: the faster variants of self-attention do worse than the original Transformer",
        "004_* question 6 (designing for long sequences)",
        "004_* question 3 (the cost of self-attention and how to reduce it)",
        "study 8 long-sequences",
    )
    profiles = {
        # Seconds: the code path (one kernel per kind: exact, pattern, approximate), numbers
        # meaningless.
        "tiny": Profile(
            dict(
                kernels=["math", "local", "performer"],
                isolate=False,
                steps=2,
                batch_size=4,
                train_size=8,
                test_size=4,
                listops_lengths=[8, 32],
                text_length=256,
                image_size=16,
                dim=16,
                depth=1,
                heads=2,
                ffn_dim=32,
                lr=1e-3,
            ),
            expected="~4 s",
            measured="3.7 s of CPU with torch's optimizer and matplotlib already imported (as in "
            "the test session); 7.9 s wall on the shared 2-core CPU (load 5)",
            cuda={},  # the same points on a GPU: a smoke test of the CUDA path
            cuda_expected="~seconds",
        ),  # fmt: skip
        # The nine distinct kernels (auto is math or sdpa by length, edges equals math on a
        # dense mask, flex trains through chunked on a CPU: full runs them), short sequences
        # (ListOps 16-64 tokens, 64 bytes, 16 x 16 pixels), 120 steps of 32 at lr 5e-3, one
        # layer: sized from step times measured on the shared CPU (300 such steps took 7-10 s
        # of CPU for listops and lra-text and learned both above their majority class);
        # generating a Pathfinder-like image takes ~0.05-0.1 s, so 1,400 of them.
        "quick": Profile(
            dict(
                kernels=QUICK_KERNELS,
                isolate=False,
                steps=120,
                batch_size=32,
                train_size=1200,
                test_size=200,
                listops_lengths=[16, 64],
                text_length=64,
                image_size=16,
                dim=32,
                depth=1,
                heads=2,
                ffn_dim=64,
                lr=5e-3,
            ),
            expected="~8 min on a 2-core CPU (9 kernels x 3 tasks x 3 seeds)",
            measured="438 s on the quiet 2-core CPU (2 threads); at 150 steps it took 628 s on "
            "one thread beside another study",
        ),  # fmt: skip
        # Every kernel at L ~ 256 (ListOps 64-256 tokens, 256 bytes, 16 x 16 pixels), 300
        # steps of 16, all in one process: a child process per point would generate its
        # 3,500 Pathfinder-like images again (~0.05-0.1 s each), so peak memory is the cost()
        # estimate here; `benchmarks/bench_long_sequences.py --isolate` measures true peaks.
        "full": Profile(
            dict(
                kernels=None,
                isolate=False,
                steps=300,
                batch_size=16,
                train_size=3000,
                test_size=500,
                listops_lengths=[64, 256],
                text_length=256,
                image_size=16,
                dim=64,
                depth=1,
                heads=4,
                ffn_dim=128,
                lr=2e-3,
            ),
            expected="~1.6 h on one thread (108 points of 300 steps at L ~ 256)",
            measured="5,893 s on one thread of the 2-core CPU beside one other single-thread study",
            # On a GPU (--device cuda): the lengths (ListOps up to 1,000 tokens,
            # 1,000-byte texts, 32 x 32 = 1,024-pixel paths) at batch 32, in one process
            # (torch.cuda's peak statistics are reset per point, so its peaks are true).
            cuda=dict(batch_size=32, listops_lengths=[500, 1000], text_length=1000, image_size=32),
            cuda_expected="not measured (108 points of 300 steps at L ~ 1,000; meant for one GPU)",
        ),  # fmt: skip
    }

    def setup(self, ctx: Context) -> str:
        s = ctx.settings
        p = lab_profile(ctx.profile, s)
        lo, hi = p.listops_lengths
        where = ("each point in its own process" if s["isolate"]
                 else "all points in this process")  # fmt: skip
        return (
            f"The long-sequence lab (`tfam.bench.long_sequences`, also "
            f"`benchmarks/bench_long_sequences.py`): tfam's BERT encoder (pre-norm, learned "
            f"positions, [CLS] pooling, D={p.dim}, {p.depth} layer(s), {p.heads} heads, FFN "
            f"{p.ffn_dim}, attention dropout 0) trained {p.steps} AdamW steps of {p.batch_size} "
            f"(lr {p.lr}, warm-up then cosine) with each kernel: the same model seed, data order "
            f"and schedule for every kernel; {where}. Tasks: `listops` (LRA's generator rules: "
            f"MAX, MIN, MED, SM, depth <= 10; here {lo} < tokens < {hi}, LRA goes to 2,000), "
            f"`lra-text` ({p.text_length}-byte KJV passages, 6 genres; LRA's is IMDB at 1,000+ "
            f"bytes) and `pathfinder32` ({p.image_size} x {p.image_size} pixels read as tokens: "
            "a Pathfinder-like task tfam generates; it is NOT LRA's Pathfinder data). "
            f"{p.train_size} training and {p.test_size} test examples per task. Pattern kernels "
            "(local, longformer, block_sparse) see ~L/16 keys each side. Machine: "
            f"{machine(ctx.device)}"
            + (
                "; the 2 cores are shared with other work, so speeds carry that noise."
                if ctx.device == "cpu"
                else "."
            )
        )

    def measure(self, ctx: Context) -> None:
        s = ctx.settings
        p = lab_profile(ctx.profile, s)
        kernels = _kernels(s)
        for task in TASKS:
            ctx.once(f"baseline/{task}", lambda task=task: majority_baseline(task, p))
        jobs = [(t, k, seed) for t in TASKS for seed in ctx.seeds for k in kernels]
        point = _isolated_point if s["isolate"] else None
        with ctx.progress.bar(len(jobs), "long-sequences") as step:
            for task, kernel, seed in jobs:

                def one(task: str = task, kernel: str = kernel, seed: int = seed) -> dict:
                    if point is not None:
                        return point(task, kernel, p, seed, ctx.device)
                    return run_point(task, kernel, p, seed=seed, device=ctx.device)

                ctx.once(f"{task}/{kernel}/seed{seed}", one)
                step(f"{task} {kernel} seed {seed}")

    def report(self, ctx: Context) -> tuple[list[Section], list[str]]:
        from tfam.viz.tradeoff import plot_tradeoff

        s = ctx.settings
        p = lab_profile(ctx.profile, s)
        kernels = _kernels(s)
        sections: list[Section] = []
        conclusions: list[str] = []
        summary: list[dict[str, Any]] = []
        tally: dict[str, list[str]] = {"faster_worse": [], "faster_same": [], "faster_better": [],
                                       "other": []}  # fmt: skip
        # On CUDA the lab resets torch.cuda's peak statistics per point: true peaks in-process.
        peaks = s["isolate"] or ctx.device != "cpu"
        memory = "measured" if peaks else "cost()"
        for task in TASKS:
            base = ctx.store.get(f"baseline/{task}")
            recs = {k: [ctx.store.get(f"{task}/{k}/seed{sd}") for sd in ctx.seeds]
                    for k in kernels}  # fmt: skip
            ok = {k: [r for r in rs if r and r.get("status") == "ok"] for k, rs in recs.items()}
            acc = {k: [r["accuracy"] for r in rs] for k, rs in ok.items() if rs}
            sps = {k: [r["steps_per_s"] for r in rs] for k, rs in ok.items() if rs}
            rows = []
            length = next((r["length"] for rs in ok.values() for r in rs), 0)
            for k in kernels:
                if k not in acc:
                    why = next((r["status"] for r in recs[k] if r), "not run")
                    rows.append([k, "-", "-", "-", "-", "-", why])
                    continue
                held = scores_held_mb(k, length, p)
                mb = summarize([r["peak_mb"] for r in ok[k]])
                a, v = summarize(acc[k]), summarize(sps[k])
                vs = ("reference" if k == REFERENCE else
                      _vs(compare(acc[k], acc[REFERENCE])) if REFERENCE in acc else "-")  # fmt: skip
                rows.append([k, ok[k][0]["exactness"], a.format(1, 100), vs, v.format(2),
                             mb.format(1), f"{held:.3f}" if held is not None else "-"])  # fmt: skip
                summary.append({
                    "task": task, "kernel": k, "exactness": ok[k][0]["exactness"],
                    "length": length, "accuracy": a.mean, "accuracy_sd": a.std,
                    "steps_per_s": v.mean,
                    "peak_mb": mb.mean if peaks else (held or 0.0),
                    "status": "ok",
                })  # fmt: skip
            sections.append(Section(
                f"{task} (L = {length} tokens with [CLS])",
                md_table(["kernel", "kind", "accuracy (%)", "against math", "steps/s",
                          "peak MB (CUDA)" if ctx.device != "cpu" else "peak MB (RSS rise)",
                          "scores held (MB)"], rows)
                + f"\n\nMajority class of the {base['test_size']} test examples: "
                f"{100 * base['majority']:.1f}% ({base['classes']} classes).",
            ))  # fmt: skip
            if REFERENCE not in acc:
                conclusions.append(f"{task}: the reference `{REFERENCE}` did not run.")
                continue
            floor = [base["majority"]] * len(acc[REFERENCE])
            learned = compare(acc[REFERENCE], floor)
            learned_any = [k for k in acc if compare(acc[k], [base["majority"]] * len(acc[k]))
                           .counts and summarize(acc[k]).mean > base["majority"]]  # fmt: skip
            conclusions.append(
                f"{task} (L = {length}): the exact `{REFERENCE}` reaches "
                f"{summarize(acc[REFERENCE]).format(1, 100)}% against the majority class's "
                f"{100 * base['majority']:.1f}%: "
                + learned.describe(REFERENCE, "the majority class", digits=1, scale=100,
                                   unit="points")
                + f"; {len(learned_any)} of {len(acc)} kernels are above the majority class."
            )  # fmt: skip
            for k in acc:
                if k == REFERENCE or ok[k][0]["exactness"] == "exact":
                    continue
                fast = compare(sps[k], sps[REFERENCE])
                good = compare(acc[k], acc[REFERENCE])
                faster = fast.counts and fast.diff > 0
                if faster and good.counts and good.diff < 0:
                    tally["faster_worse"].append(f"{k} ({task})")
                elif faster and not good.counts:
                    tally["faster_same"].append(f"{k} ({task})")
                elif faster:
                    tally["faster_better"].append(f"{k} ({task})")
                else:
                    tally["other"].append(f"{k} ({task})")
        png = ctx.figure("long_sequences.png")
        plot_tradeoff(summary, png, title=f"long sequences, profile {ctx.profile}: speed, "
                      f"accuracy, memory ({'peak MB' if peaks else 'scores held'} "
                      "as marker area)")  # fmt: skip
        sections.append(Section(
            "Speed, accuracy and memory",
            f"![speed-accuracy-memory scatter]({png.name})\n\nOne panel per task, one point "
            "per kernel (mean over seeds, bar: sd): x training steps/s, y test accuracy; "
            "marker area: "
            + ("the measured peak memory." if peaks else
               "the attention scores the kernel holds (its cost()), since in one process the "
               "resident-set rise of a later point is hidden by an earlier one's.")
            + " Circle exact, square pattern, triangle approximate.",
        ))  # fmt: skip
        n = sum(len(v) for v in tally.values())
        conclusions.append(
            f"Approximate and pattern kernels against `{REFERENCE}`, per task ({n} pairs): "
            f"faster and less accurate: {len(tally['faster_worse'])}"
            + (f" ({', '.join(tally['faster_worse'])})" if tally["faster_worse"] else "")
            + f"; faster with no accuracy difference measured: {len(tally['faster_same'])}"
            + (f" ({', '.join(tally['faster_same'])})" if tally["faster_same"] else "")
            + f"; faster and more accurate: {len(tally['faster_better'])}"
            + (f" ({', '.join(tally['faster_better'])})" if tally["faster_better"] else "")
            + f"; not measurably faster: {len(tally['other'])}"
            + (f" ({', '.join(tally['other'])})" if tally["other"] else "")
            + ". "
            + _verdict(tally)
        )
        longest = max(p.listops_lengths[1], p.text_length, p.image_size**2)
        conclusions.append(
            f"Lengths here are at most {longest} tokens on {ctx.device} (LRA: 1,000-4,000)"
            + (": at such lengths the O(L²) score matrix is small, so the efficient kernels' "
               "savings are small too" if longest < 1000 else "")
            + "; the pathfinder32 task is tfam's own generator, not LRA's data. "
            + _gpu_rows(ctx.device)
            + f" Peak memory is {memory}"
            + (" (each point in its own process)." if s["isolate"] else
               " (torch.cuda's peak, reset per point)." if peaks else
               ": in one process the resident-set rise is a lower bound, so the scatter shows "
               "each kernel's cost() estimate instead.")
        )  # fmt: skip
        return sections, conclusions


def _gpu_rows(device: str) -> str:
    """Where the issue's CUDA rows (LRA's lengths) stand, from what this run could see."""
    if device != "cpu":
        return "These are the GPU rows."
    import torch

    if torch.cuda.is_available():
        return "The GPU rows at LRA's lengths: rerun with `--profile full --device cuda`."
    return ("The GPU rows at LRA's lengths (`--profile full --device cuda`) were not run: no "
            "GPU is visible to torch on this machine.")  # fmt: skip


def _vs(c: Any) -> str:
    """'-3.1 (counts)' or '+0.4 (no diff.)': accuracy points against the reference."""
    return f"{100 * c.diff:+.1f} ({'counts' if c.counts else 'no diff.'})"


def _verdict(tally: dict[str, list[str]]) -> str:
    worse = len(tally["faster_worse"])
    same = len(tally["faster_same"]) + len(tally["faster_better"])
    if worse and worse >= same:
        return "The claim holds for most of the faster kernels here."
    if worse:
        return "The claim holds only in part here: more of the faster kernels lost no measurable accuracy."
    if same:
        return "The claim does not hold here: no faster kernel lost measurable accuracy."
    return "No kernel was measurably faster than the reference here, so the claim is not tested at these lengths."
