"""The long-sequence lab: every attention kernel trains the same small encoder on the Long Range
Arena–style tasks (Tay et al. 2020) for the same number of steps; accuracy, training speed and
peak memory per kernel (the claim that the faster variants of self-attention do worse).

    rows = run("tiny", kernels=["sdpa", "linear"], tasks=["listops"])   # list of dicts
    print(format_table(rows))
    summary = summarize(rows)          # per (task, kernel): accuracy mean and sd over seeds

``python -m tfam.bench.long_sequences '<json>'`` runs one (task, kernel, seed) point in a fresh
process and prints its row as one JSON line: ``run(..., isolate=True)`` does that for every
point, so each peak memory is its own process's (``benchmarks/bench_long_sequences.py``).

The tasks (``tfam.data.sources``): ``listops`` (generated with LRA's rules), ``lra-text``
(1,000-byte King James passages by genre; LRA's is IMDB) and ``pathfinder32`` (a Pathfinder-
like task tfam generates): not LRA's data, and (CPU budget) shorter training than LRA's.
The encoder: tfam's BERT, pre-norm, learned positions, [CLS] pooling, ``attn_dropout=0`` (the
approximate and chunked kernels refuse attention dropout). Every kernel gets the same model
seed, data order and schedule (AdamW, linear warm-up over 10% of the steps, cosine to 0).
Pattern kernels get a window of about L / 16 keys each side (LRA's local attention: 32 of
1,000-4,000 tokens); a kernel that refuses what the encoder asks is a row whose ``status``
is its one-line refusal.

Measured per point: ``accuracy`` on the test examples after the last step; ``steps_per_s``
over the steps after the first (which builds caches and plans); ``peak_mb``: on CUDA
``max_memory_allocated`` during the training steps over what was allocated before them; on the
CPU the rise of the process's resident-set high-water mark over the training steps
(:class:`tfam.bench.child.CpuPeak`; in-process, memory the allocator kept from an earlier point
may hide part of the rise: ``isolate=True`` avoids it).
"""

from __future__ import annotations

import functools
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from tfam.bench.child import CpuPeak
from tfam.config import ATTENTION_KERNELS
from tfam.data.sources.bytetext import load_bytetext
from tfam.data.sources.listops import load_listops
from tfam.data.sources.lra import SequenceSet
from tfam.data.sources.pathfinder import load_pathfinder
from tfam.models.bert import Bert, BertConfig

__all__ = [
    "PROFILES",
    "TASKS",
    "Profile",
    "format_table",
    "kernel_options",
    "load_task",
    "run",
    "run_point",
    "summarize",
]

TASKS = ("listops", "lra-text", "pathfinder32")


@dataclass(frozen=True)
class Profile:
    """One setting of the lab: data sizes and lengths, the encoder, the training budget, and
    ``expected`` (the time it was measured to take, for ``--list`` and the docs)."""

    name: str
    steps: int
    batch_size: int
    train_size: int
    test_size: int
    listops_lengths: tuple[int, int]  # min < tokens < max
    text_length: int  # bytes per passage
    image_size: int  # pathfinder side (pixels)
    dim: int = 64
    depth: int = 2
    heads: int = 4
    ffn_dim: int = 128
    lr: float = 1e-3
    expected: str = ""


PROFILES: dict[str, Profile] = {
    # Seconds: the code path end to end, numbers meaningless.
    "tiny": Profile("tiny", steps=3, batch_size=4, train_size=24, test_size=16,
                    listops_lengths=(8, 48), text_length=64, image_size=16, dim=32, heads=2,
                    ffn_dim=64, expected="~5 s per kernel (3 tasks), one seed, 2-core CPU"),
    # Short sequences (at most 128 ListOps tokens, 128 bytes, 16 x 16 pixels), 100 steps: the
    # code path at a size a shared 2-core CPU trains in minutes; far from LRA's lengths.
    "quick": Profile("quick", steps=100, batch_size=8, train_size=1600, test_size=400,
                     listops_lengths=(32, 128), text_length=128, image_size=16,
                     expected="~10-20 s per point (task, kernel, seed) on the shared 2-core CPU: "
                     "about 8 minutes for 11 kernels x 3 tasks, one seed (not yet timed whole)"),
    # The lengths (ListOps < 1,000 tokens, 1,000 bytes, 32 x 32 = 1,024 pixels).
    "full": Profile("full", steps=1000, batch_size=16, train_size=10000, test_size=1000,
                    listops_lengths=(500, 1000), text_length=1000, image_size=32,
                    expected="not run: L ~ 1,000, 1,000 steps of 16; on the shared CPU math ran 1.7 steps/s at L 256 with batch 16, so hours per task; meant for a GPU"),
}  # fmt: skip


def load_task(task: str, split: str, profile: Profile, size: int) -> SequenceSet:
    """``size`` examples of ``task``'s ``split`` at ``profile``'s lengths."""
    if task == "listops":
        lo, hi = profile.listops_lengths
        return load_listops(split, size=size, min_length=lo, max_length=hi)
    if task == "lra-text":
        data = _bytetext(split, profile.text_length)
    elif task == "pathfinder32":
        data = load_pathfinder(split, size=size, image_size=profile.image_size)
    else:
        raise ValueError(f"task={task!r} is invalid: expected one of {', '.join(TASKS)}")
    if len(data) > size:  # the first `size` in the split's hash order: every class appears
        keep = torch.arange(size)
        data = SequenceSet(
            data.ids[keep, 1:], data.labels[keep], data.classes, data.vocab, name=data.name
        )
    return data


@functools.lru_cache(maxsize=4)
def _bytetext(split: str, length: int) -> SequenceSet:
    """The whole ``split`` of lra-text, built once a process: building it (every passage's
    bytes as ids) costs seconds, and every point of a run asks for it again."""
    return load_bytetext(split, length=length)


def kernel_options(kernel: str, length: int) -> dict[str, Any]:
    """The options a kernel trains with at sequence ``length`` (ids with [CLS]): pattern
    kernels a window of ~L/16 keys each side (at least 4), BigBird blocks of ~L/16 tokens; the
    others their defaults."""
    window = max(4, length // 16)
    if kernel == "local":
        return {"window": window}
    if kernel == "longformer":
        return {"window": window, "global_tokens": [0]}
    if kernel == "block_sparse":
        return {"block": window, "window_blocks": 1, "global_blocks": 1, "random_blocks": 2}
    if kernel == "performer":
        return {"features": 64}
    if kernel == "lsh":
        return {"chunk": max(8, length // 16)}
    return {}


def _schedule(step: int, steps: int) -> float:
    """The learning-rate factor at ``step`` (0-based): linear warm-up over 10%, cosine to 0."""
    warm = max(1, steps // 10)
    if step < warm:
        return (step + 1) / warm
    return 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))


def _peak_start(device: torch.device) -> Callable[[], float]:
    """Start measuring peak memory on ``device``; the returned function gives MB (1e6 B)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        return lambda: (torch.cuda.max_memory_allocated(device) - base) / 1e6
    peak = CpuPeak()
    peak.start()
    return peak.stop


def run_point(
    task: str,
    kernel: str,
    profile: Profile | str = "tiny",
    *,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> dict[str, Any]:
    """Train the encoder with ``kernel`` on ``task`` for ``profile.steps`` steps; its row:
    task, kernel, options, exactness, seed, length, params, status ("ok" or the refusal),
    accuracy, final_loss, steps_per_s, peak_mb, memory ("cuda" or "cpu-rss"), seconds."""
    p = PROFILES[profile] if isinstance(profile, str) else profile
    device = torch.device(device)
    kind = ATTENTION_KERNELS[kernel] if kernel in ATTENTION_KERNELS else None
    train = load_task(task, "train", p, p.train_size)
    test = load_task(task, "test", p, p.test_size)
    length = max(train.max_length, test.max_length)
    options = kernel_options(kernel, length)
    row: dict[str, Any] = {
        "task": task,
        "kernel": kernel,
        "options": options,
        "exactness": kind.exactness if kind is not None else "",
        "seed": seed,
        "profile": p.name,
        "length": length,
        "device": str(device),
        "memory": "cuda" if device.type == "cuda" else "cpu-rss",
        "status": "ok",
    }
    started = time.perf_counter()
    try:
        torch.manual_seed(seed)
        config = BertConfig(
            vocab_size=train.vocab_size, max_positions=length, dim=p.dim, depth=p.depth,
            heads=p.heads, ffn_dim=p.ffn_dim, norm_first=True, dropout=0.1, attn_dropout=0.0,
            head="sequence", num_labels=train.num_labels, pad_token_id=train.pad_token_id,
            attention=kernel, attention_options=options,
        )  # fmt: skip
        model = Bert(config).to(device)
    except ValueError as err:
        return {**row, "status": f"refused: {err}"}
    row["params"] = sum(q.numel() for q in model.parameters())
    optim = torch.optim.AdamW(model.parameters(), lr=p.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda s: _schedule(s, p.steps))
    order = torch.Generator().manual_seed(seed)
    model.train()
    losses: list[float] = []
    timed_from = peak = None
    try:
        for step in range(p.steps):
            if step == 1:  # the first step builds plans and caches: time and measure the rest
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                peak = _peak_start(device)
                timed_from = time.perf_counter()
            index = torch.randint(0, len(train), (p.batch_size,), generator=order)
            batch = {k: v.to(device) for k, v in train.get_batch(index).items()}
            logits = model(batch["input_ids"], attention_mask=batch["attention_mask"])
            loss = torch.nn.functional.cross_entropy(logits.float(), batch["labels"])
            optim.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optim.step()
            sched.step()
            losses.append(float(loss.detach()))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elapsed = time.perf_counter() - timed_from if timed_from is not None else float("nan")
        row["peak_mb"] = round(peak(), 1) if peak is not None else float("nan")
    except ValueError as err:  # a kernel refusing a feature of the call: one line
        return {**row, "status": f"refused: {err}"}
    row["steps_per_s"] = (p.steps - 1) / elapsed if p.steps > 1 else float("nan")
    row["final_loss"] = statistics.fmean(losses[-max(1, len(losses) // 10) :])
    row["accuracy"] = evaluate(model, test, device, p.batch_size * 4)
    row["seconds"] = round(time.perf_counter() - started, 2)
    return row


@torch.no_grad()
def evaluate(model: torch.nn.Module, data: SequenceSet, device: torch.device, batch: int) -> float:
    """The fraction of ``data`` the model classifies right (eval mode, batches of ``batch``)."""
    model.eval()
    right = 0
    for start in range(0, len(data), batch):
        got = data.get_batch(torch.arange(start, min(start + batch, len(data))))
        logits = model(got["input_ids"].to(device), attention_mask=got["attention_mask"].to(device))
        right += int((logits.argmax(-1).cpu() == got["labels"]).sum())
    model.train()
    return right / max(1, len(data))


def _isolated(spec: dict[str, Any], timeout: float | None) -> dict[str, Any]:
    """One point in a fresh ``python -m tfam.bench.long_sequences`` process."""
    cmd = [sys.executable, "-m", "tfam.bench.long_sequences", json.dumps(spec)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {**spec, "status": f"timeout after {timeout:.0f} s"}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {**spec, "status": f"error: {tail}"}
    return json.loads(lines[-1])


def run(
    profile: Profile | str = "tiny",
    *,
    kernels: Sequence[str] | None = None,
    tasks: Sequence[str] = TASKS,
    seeds: Sequence[int] = (0,),
    device: str = "cpu",
    isolate: bool = False,
    timeout: float | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Every (task, kernel, seed) point of ``profile`` (see :func:`run_point`); ``kernels``:
    default every registered kernel. ``isolate``: each point in its own process (its own peak
    memory; ``timeout`` seconds at most each). ``progress`` is called with each row."""
    p = PROFILES[profile] if isinstance(profile, str) else profile
    names = list(kernels) if kernels is not None else list(ATTENTION_KERNELS)
    rows = []
    for task in tasks:
        for kernel in names:
            for seed in seeds:
                if isolate:
                    spec = {"task": task, "kernel": kernel, "profile": asdict(p), "seed": seed,
                            "device": device}  # fmt: skip
                    row = _isolated(spec, timeout)
                else:
                    row = run_point(task, kernel, p, seed=seed, device=device)
                rows.append(row)
                if progress is not None:
                    progress(row)
    return rows


def summarize(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (task, kernel): seeds, accuracy mean and standard deviation (0 for one seed),
    steps/s and peak MB means, and the status (the first refusal, else "ok")."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["task"], row["kernel"]), []).append(row)
    out = []
    for (task, kernel), group in groups.items():
        ok = [r for r in group if r.get("status") == "ok"]
        if not ok:
            out.append({"task": task, "kernel": kernel, "seeds": 0, "status": group[0]["status"]})
            continue
        acc = [r["accuracy"] for r in ok]
        out.append({
            "task": task,
            "kernel": kernel,
            "exactness": ok[0]["exactness"],
            "length": ok[0]["length"],
            "seeds": len(ok),
            "accuracy": statistics.fmean(acc),
            "accuracy_sd": statistics.stdev(acc) if len(acc) > 1 else 0.0,
            "steps_per_s": statistics.fmean(r["steps_per_s"] for r in ok),
            "peak_mb": statistics.fmean(r["peak_mb"] for r in ok),
            "memory": ok[0]["memory"],
            "status": "ok",
        })  # fmt: skip
    return out


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """The summary of ``rows`` as a plain-text table, one line per (task, kernel)."""
    lines = [
        f"{'task':<13} {'kernel':<13} {'kind':<11} {'L':>5} {'seeds':>5} {'accuracy':>15} "
        f"{'steps/s':>8} {'peak MB':>8}"
    ]
    for s in summarize(rows):
        if s["status"] != "ok":
            lines.append(f"{s['task']:<13} {s['kernel']:<13} {s['status']}")
            continue
        acc = f"{100 * s['accuracy']:.1f}" + (
            f" ± {100 * s['accuracy_sd']:.1f}" if s["seeds"] > 1 else ""
        )
        lines.append(
            f"{s['task']:<13} {s['kernel']:<13} {s['exactness']:<11} {s['length']:>5} "
            f"{s['seeds']:>5} {acc + ' %':>15} {s['steps_per_s']:>8.2f} {s['peak_mb']:>8.1f}"
        )
    return "\n".join(lines)


def _main(argv: Sequence[str]) -> None:
    """The child: one point from its JSON spec, its row printed as one JSON line."""
    spec = json.loads(argv[0])
    profile = Profile(**{k: tuple(v) if isinstance(v, list) else v
                         for k, v in spec["profile"].items()})  # fmt: skip
    torch.set_num_threads(int(spec.get("threads", torch.get_num_threads())))
    row = run_point(
        spec["task"], spec["kernel"], profile, seed=int(spec["seed"]), device=spec["device"]
    )
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    _main(sys.argv[1:])
