"""Study ``speech-truncated``: ``001_*`` says that speech is a very long sequence of vectors (a
25 ms window every 10 ms) and that truncated self-attention, each frame attending only to the
frames around it, is what makes it affordable. Does the window cost accuracy, and what does it
save?

1. Accuracy: the speech encoder (preset speech_digits_tag, made smaller) trained by the
   spoken-digits tagging recipe (:func:`tfam.training.recipes.train_recipe`, as ``tfam train
   speech --data spoken-digits --task frame-classification``) with ``local`` attention of
   window w (frames each side after subsampling) and with dense attention (``sdpa``); frame
   accuracy (word or silence per 10 ms) on the held-out voices' utterances as they are, and on
   long utterances: the same test utterances joined end to end into streams of
   ``long_frames`` frames, longer than anything seen in training.
2. Cost: one training step (forward, cross-entropy, backward) on one utterance of T frames,
   each point in a fresh process (:mod:`tfam.bench.speech_memory`, the measurement behind
   benchmarks/bench_speech_memory.py): median time and peak memory per window, against T.

Without the corpus (it is built once with eSpeak NG), ``tiny`` uses synthetic frames: segments
of a class drawn at random, each class a mean vector plus noise.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from tfam.studies.base import Context, Profile, Section, Study, md_table, register_study
from tfam.studies.common import machine
from tfam.studies.stats import compare, summarize

__all__ = ["SpeechTruncatedStudy", "join_utterances", "synthetic_frames"]

DENSE = 0  # a window of 0 in the settings means dense attention (sdpa)


def join_utterances(data: Any, frames: int) -> Any:
    """The utterances of ``data`` (a SpeechDataset with a label per frame) joined in order
    into streams of at least ``frames`` frames (the last may be shorter): long utterances made
    of real ones, their labels joined alike."""
    from tfam.data.sources.speech import SpeechDataset

    feats, labels, cur_f, cur_l, n = [], [], [], [], 0
    for f, y in zip(data.features, data.labels, strict=True):
        cur_f.append(f)
        cur_l.append(y)
        n += f.shape[0]
        if n >= frames:
            feats.append(torch.cat(cur_f))
            labels.append(torch.cat(cur_l))
            cur_f, cur_l, n = [], [], 0
    if cur_f:
        feats.append(torch.cat(cur_f))
        labels.append(torch.cat(cur_l))
    return SpeechDataset(feats, labels, data.info)


def synthetic_frames(count: int, n_mels: int, classes: int, seed: int, length: int = 48) -> Any:
    """``count`` synthetic utterances of ``length`` frames: segments of 4-12 frames, each of a
    random class, frames = the class's mean vector (fixed, seed 0) + N(0, 1) noise."""
    from tfam.data.sources.speech import SpeechDataset, SpeechInfo

    means = torch.randn(classes, n_mels, generator=torch.Generator().manual_seed(0)) * 1.5
    g = torch.Generator().manual_seed(seed)
    feats, labels = [], []
    for _ in range(count):
        ys = []
        while len(ys) < length:
            ys += [int(torch.randint(classes, (1,), generator=g))] * int(
                torch.randint(4, 13, (1,), generator=g)
            )
        y = torch.tensor(ys[:length])
        feats.append(means[y] + torch.randn(length, n_mels, generator=g))
        labels.append(y)
    info = SpeechInfo("synthetic-frames", "frame-classification", "frames", classes,
                      classes=tuple(f"c{i}" for i in range(classes)), n_mels=n_mels)  # fmt: skip
    return SpeechDataset(feats, labels, info)


def _data(s: dict[str, Any]) -> tuple[Any, Any, Any] | str:
    """(entry, train, test) for tagging words; a string says why there is none."""
    from tfam.data import get_dataset

    entry = get_dataset("spoken-digits").for_task("frame-classification", labels="word")
    if s["synthetic"]:
        train = synthetic_frames(s["train_utterances"], s["n_mels"], 3, seed=1)
        test = synthetic_frames(max(2, s["train_utterances"] // 4), s["n_mels"], 3, seed=2)
        return dataclasses.replace(entry, info=train.info), train, test
    from tfam.data.sources.spoken_digits import read_manifest

    if read_manifest() is None:
        return "the spoken-digits corpus is not built here (tfam builds it with eSpeak NG)"
    return entry, entry.load("train"), entry.load("test")


def _overrides(s: dict[str, Any], window: int) -> dict[str, Any]:
    model = dict(s["model"])
    if window == DENSE:
        return {**model, "attention": "sdpa", "attention_options": {}}
    return {**model, "attention": "local", "attention_options": {"window": window}}


def _label(window: int) -> str:
    return "dense (sdpa)" if window == DENSE else f"local w={window}"


def _train(window: int, seed: int, s: dict[str, Any], data: tuple[Any, Any, Any]) -> dict:
    from tfam.training.recipes import train_recipe

    entry, train, test = data
    if s["train_utterances"] and len(train) > s["train_utterances"]:
        train = train.subset(list(range(s["train_utterances"])))
    run = train_recipe(
        entry, train, test, seed=seed, overrides=_overrides(s, window),
        train={"max_steps": s["steps"], "max_minutes": None, "epochs": 1000,
               "warmup_epochs": 0.0, "warmup_steps": max(1, s["steps"] // 10),
               "batch_tokens": s["batch_frames"], "num_workers": 0, "eval_batch_tokens": 4 * s["batch_frames"]},
    )  # fmt: skip
    long = join_utterances(test, s["long_frames"])
    return {"accuracy": run.metrics(test)["acc"], "long_accuracy": run.metrics(long)["acc"],
            "long_utterances": len(long), "long_mean_frames": float(long.lengths.float().mean()),
            "steps": run.steps, "seconds": run.seconds, "cpu_seconds": run.cpu_seconds}  # fmt: skip


def _cost(window: int, frames: int, s: dict[str, Any]) -> dict[str, Any]:
    from tfam.bench.speech_memory import child, run_point

    overrides = {**_overrides(s, window), "n_mels": s["n_mels"]}
    spec = {"preset": "speech_digits_tag", "overrides": overrides, "kernel":
            overrides["attention"], "frames": frames, "threads": 1, "repeat": s["repeat"],
            "budget": s["budget"]}  # fmt: skip
    if not s["isolated"]:  # tiny: in this process (no fresh process, so memory is rough)
        return {**child(spec), "isolated": False}
    return {**run_point(spec, timeout=s["timeout"]), "isolated": True}


SMALL = {"dim": 64, "depth": 2, "heads": 4, "ffn_dim": 256}


@register_study
class SpeechTruncatedStudy(Study):
    name = "speech-truncated"
    title = "Speech: truncated self-attention's window against accuracy, time and memory"
    claim = (
        "001_* says a few seconds of speech are thousands of vectors (a 25 ms window every "
        "10 ms), costly in computation and memory, and that truncated self-attention looks only "
        "at a few vectors before and after, the span chosen from an understanding of the task."
    )
    questions = ("001_*: truncated self-attention for speech",
                 "004_* question 6: designing for long sequences", "study 13 speech-truncated")  # fmt: skip
    profiles = {
        "tiny": Profile(
            dict(
                synthetic=True,
                n_mels=8,
                model={"dim": 16, "depth": 1, "heads": 2, "ffn_dim": 32},
                windows=[2, DENSE],
                train_utterances=8,
                steps=2,
                batch_frames=192,
                long_frames=96,
                cost_frames=[64, 128],
                repeat=1,
                budget=5.0,
                timeout=60.0,
                isolated=False,
            ),  # fmt: skip
            expected="~3 s (synthetic frames, no corpus)",
        ),
        "quick": Profile(
            dict(
                synthetic=False,
                n_mels=80,
                model=SMALL,
                windows=[1, 4, 16, DENSE],
                train_utterances=600,
                steps=150,
                batch_frames=4000,
                long_frames=3000,
                cost_frames=[500, 2000, 8000],
                repeat=2,
                budget=20.0,
                timeout=120.0,
                isolated=True,
            ),  # fmt: skip
            expected="~8 min (3 seeds; estimated from measured CPU per step, ~0.1 s, and 1 min of features)",
        ),
        "full": Profile(
            dict(
                synthetic=False,
                n_mels=80,
                model=SMALL,
                windows=[1, 2, 4, 8, 16, 32, DENSE],
                train_utterances=0,
                steps=1500,
                batch_frames=8000,
                long_frames=3000,
                cost_frames=[500, 1000, 2000, 4000, 8000],
                repeat=3,
                budget=60.0,
                timeout=300.0,
                isolated=True,
            ),  # fmt: skip
            expected="~2 h (3 seeds; estimated, not measured)",
        ),
    }

    def setup(self, ctx: Context) -> str:
        s = ctx.settings
        m = s["model"]
        data = ("synthetic frames (3 classes, segments of 4-12 frames; the corpus is not used "
                "at this profile)" if s["synthetic"] else "the spoken digits (eSpeak NG, 30 "
                "voices, noise at 20/10/5 dB), word-or-silence label per 10 ms frame, trained on "
                + (f"the first {s['train_utterances']} training utterances"
                   if s["train_utterances"] else "every training utterance")
                + ", tested on the held-out voices")  # fmt: skip
        return (
            f"Speech encoder (preset speech_digits_tag with D={m['dim']}, {m['depth']} blocks, "
            f"{m['heads']} heads, FFN {m['ffn_dim']}, 2x conv subsampling: one position per "
            f"20 ms) trained by the tagging recipe (tfam.training.recipes.train_recipe) for "
            f"{s['steps']} AdamW steps of ~{s['batch_frames']} padded frames, on {data}. "
            "Windows w are positions each side after subsampling (w=16 is ±320 ms); dense = "
            "sdpa over the whole utterance. Long utterances: the test utterances joined end to "
            f"end into streams of >= {s['long_frames']} frames. Cost: one training step on one "
            f"utterance of T frames (batch 1), "
            + ("each point in a fresh process (tfam.bench.speech_memory)" if s["isolated"]
               else "in this process (memory rough)")
            + f". Machine: {machine()}; the 2 cores were shared with other work."
        )  # fmt: skip

    def measure(self, ctx: Context) -> None:
        s = ctx.settings
        windows = s["windows"]
        keys = [f"train/w{w}/seed{sd}" for sd in ctx.seeds for w in windows]
        # The features take a minute to compute: only when a training record is missing.
        data = _data(s) if any(k not in ctx.store for k in keys) else None
        cost_jobs = [(w, t) for t in s["cost_frames"] for w in windows]
        with ctx.progress.bar(len(cost_jobs), "speech-truncated: cost") as step:
            for w, t in cost_jobs:
                ctx.once(f"cost/w{w}/T{t}", lambda w=w, t=t: _cost(w, t, s))
                step(f"{_label(w)} T={t}")
        if isinstance(data, str):
            ctx.store.put("accuracy_missing", data)
            return
        if data is None:
            return
        jobs = [(w, seed) for seed in ctx.seeds for w in windows]
        with ctx.progress.bar(len(jobs), "speech-truncated: train") as step:
            for w, seed in jobs:
                ctx.once(f"train/w{w}/seed{seed}", lambda w=w, sd=seed: _train(w, sd, s, data))
                step(f"{_label(w)} seed {seed}")

    def report(self, ctx: Context) -> tuple[list[Section], list[str]]:
        s = ctx.settings
        windows = s["windows"]
        sections, conclusions = [], []
        cost = {(w, t): ctx.store.get(f"cost/w{w}/T{t}") for w in windows for t in s["cost_frames"]}
        ok = lambda p: p and p.get("status") == "ok"  # noqa: E731
        rows = [[_label(w)] + [f"{p['ms']:.0f} ms, {p['peak_mb']:.1f} MB" if ok(p)
                               else p.get("status", "-") for t in s["cost_frames"]
                               for p in [cost[(w, t)]]] for w in windows]  # fmt: skip
        png_cost = ctx.figure("speech_truncated_cost.png")
        _plot_cost(cost, windows, s["cost_frames"], png_cost)
        sections.append(Section(
            "Cost of one training step (batch 1) against the utterance's frames",
            md_table(["attention", *[f"T={t} ({t / 100:g} s)" for t in s["cost_frames"]]],
                     rows) + f"\n\n![time and peak memory against frames]({png_cost.name})",
        ))  # fmt: skip
        longest = max(s["cost_frames"])
        dense, small = cost.get((DENSE, longest)), cost.get((min(w for w in windows if w), longest))
        if DENSE in windows and ok(dense) and ok(small):
            smallest = min(w for w in windows if w)
            mem = (
                f"{small['peak_mb'] / dense['peak_mb']:.2f}x the memory"
                if min(small["peak_mb"], dense["peak_mb"]) >= 1.0
                else "peaks below 1 MB: too small to compare"
            )
            conclusions.append(
                f"At T={longest} frames ({longest / 100:.1f} s) one training step with local "
                f"attention w={smallest} took {small['ms']:.0f} ms and {small['peak_mb']:.0f} MB "
                f"at its peak, dense attention {dense['ms']:.0f} ms and {dense['peak_mb']:.0f} MB "
                f"({small['ms'] / dense['ms']:.2f}x the time, {mem}; one measurement per point, "
                "no standard error)."
            )
        missing = ctx.store.get("accuracy_missing")
        if missing:
            sections.append(Section("Accuracy", f"Not measured: {missing}."))
            conclusions.append(f"Accuracy was not measured: {missing}.")
            return sections, conclusions
        rec = lambda w, k: [ctx.store.get(f"train/w{w}/seed{sd}")[k] for sd in ctx.seeds]  # noqa: E731
        first = ctx.store.get(f"train/w{windows[0]}/seed{ctx.seeds[0]}")
        rows = [[_label(w), f"±{w * 20} ms" if w else "whole utterance",
                 summarize(rec(w, "accuracy")).format(2, 100),
                 summarize(rec(w, "long_accuracy")).format(2, 100),
                 f"{summarize(rec(w, 'cpu_seconds')).mean:.0f}"] for w in windows]  # fmt: skip
        png = ctx.figure("speech_truncated_accuracy.png")
        _plot_accuracy({w: (rec(w, "accuracy"), rec(w, "long_accuracy")) for w in windows}, png)
        sections.append(Section(
            "Frame accuracy against the window",
            md_table(["attention", "context", "test utterances (%)",
                      f"long: {first['long_utterances']} streams of ~"
                      f"{first['long_mean_frames']:.0f} frames (%)", "training CPU s"], rows)
            + f"\n\n![accuracy against the window]({png.name})",
        ))  # fmt: skip
        if DENSE in windows:
            for w in (w for w in windows if w):
                for key, what in (("accuracy", "test utterances"), ("long_accuracy", "long")):
                    c = compare(rec(w, key), rec(DENSE, key))
                    conclusions.append(f"{what}, local w={w} against dense: "
                                       + c.describe(f"w={w}", "dense", 2, 100, "points") + ".")  # fmt: skip
        return sections, conclusions


def _plot_cost(cost: dict, windows: list[int], frames: list[int], png: Any) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tfam.viz.figure import save_figure

    fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.4))
    for w in windows:
        pts = [(t, cost[(w, t)]) for t in frames if cost[(w, t)].get("status") == "ok"]
        for ax, key in zip(axes, ("ms", "peak_mb"), strict=True):
            ax.plot([t for t, _ in pts], [max(p[key], 1e-3) for _, p in pts], marker="o",
                    label=_label(w))  # fmt: skip
    for ax, label in zip(axes, ("ms per training step", "peak MB of the step"), strict=True):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("frames (10 ms each)")
        ax.set_ylabel(label)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, png)
    plt.close(fig)


def _plot_accuracy(acc: dict[int, tuple[list[float], list[float]]], png: Any) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tfam.viz.figure import save_figure

    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    names = [_label(w) for w in acc]
    x = range(len(names))
    for i, what in enumerate(("test utterances", "long streams")):
        stats = [summarize(acc[w][i]) for w in acc]
        ax.errorbar([j + 0.1 * (i - 0.5) for j in x], [100 * m.mean for m in stats],
                    yerr=[100 * m.std for m in stats], marker="o", capsize=3, label=what,
                    linestyle="none")  # fmt: skip
    ax.set_xticks(list(x), names, fontsize=8)
    ax.set_ylabel("frame accuracy (%)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, png)
    plt.close(fig)
