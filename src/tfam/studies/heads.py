"""Study ``heads``: ``001_*`` says more heads help translation and speech. 1, 2, 4, 8 and 16
heads at the same width D (so Dh = D / H shrinks as H grows, the parameter count stays the
same), on two tasks, through tfam's families and tasks (:mod:`tfam.studies.seqtasks`):

1. translation: the encoder–decoder Transformer on a reduced King James -> Reina-Valera
   budget (short verses, a few hundred steps), scored on held-out books by teacher-forced
   token accuracy and the chrF of greedy translations;
2. speech frame tagging: the speech encoder tagging each 10 ms frame of the spoken digits
   with its word or silence, scored by frame accuracy on held-out voices.
"""

from __future__ import annotations

from typing import Any

from tfam.studies.base import Context, Profile, Section, Study, md_table, register_study
from tfam.studies.common import machine
from tfam.studies.seqtasks import speech_data, train_speech, train_translation, translation_data
from tfam.studies.stats import compare, summarize

__all__ = ["HeadsStudy"]

TASKS = {
    "translation": ("translation (kjv-rv)", "acc", "token accuracy (%)"),
    "speech": ("speech frame tagging", "acc", "frame accuracy (%)"),
}


@register_study
class HeadsStudy(Study):
    name = "heads"
    parallel = True  # independent training runs: tfam study --jobs N
    title = "How many heads: 1 to 16 at the same width, on translation and speech"
    claim = (
        "001_* says multi-head self-attention, several heads each looking for its own kind of "
        "relation, helps tasks such as translation and speech recognition more than one head."
    )
    questions = ("001_*: more heads help translation and speech", "study 5 heads")
    profiles = {
        "tiny": Profile(
            dict(
                heads=[1, 4, 16],
                dim=16,
                depth=1,
                steps=2,
                batch=8,
                lr=3e-3,
                translation="reverse",
                vocab=20,
                n_train=32,
                n_test=8,
                max_len=16,
                decode=4,
                speech="synthetic",
                speech_test=8,
                speech_steps=2,
                speech_batch=8,
            ),  # fmt: skip
            expected="~4 s (stand-in data: the reverse task, synthetic frames)",
        ),
        "quick": Profile(
            dict(
                heads=[1, 2, 4, 8, 16],
                dim=64,
                depth=2,
                steps=120,
                batch=32,
                lr=2e-3,
                translation="kjv-rv",
                vocab=2000,
                n_train=6000,
                n_test=200,
                max_len=40,
                decode=50,
                speech="spoken-digits",
                speech_test=60,
                speech_steps=60,
                speech_batch=16,
            ),  # fmt: skip
            expected="~10 min (sized from measured step times)",
        ),
        "full": Profile(
            dict(
                heads=[1, 2, 4, 8, 16],
                dim=64,
                depth=2,
                steps=1800,
                batch=64,
                lr=2e-3,
                translation="kjv-rv",
                vocab=2000,
                n_train=20000,
                n_test=500,
                max_len=40,
                decode=200,
                speech="spoken-digits",
                speech_test=434,
                speech_steps=250,
                speech_batch=32,
            ),  # fmt: skip
            # Sized from the CPU seconds a step measured on one thread (docs/studies/heads.md);
            # the quick profile's width, where 120 steps learn nothing.
            expected="~1.3 h with --jobs 2 on a quiet 2-core CPU (~2.5 h of one thread's training)",
            measured="4,563 s (1 h 16 min) of wall time with --jobs 2 on the 2-core CPU, little "
            "else running (the records' training 8,837 s, one thread each)",
        ),
    }

    def setup(self, ctx: Context) -> str:
        s = ctx.settings
        return (
            f"Heads {s['heads']} at width D={s['dim']} (Dh = D/H), FFN 4D, no dropout, AdamW "
            f"(lr {s['lr']}, warmup 10%, linear decay), batch {s['batch']}. Translation "
            f"({s['translation']}): tfam's encoder–decoder (N={s['depth']} post-norm blocks "
            f"each side, sinusoidal positions) trained {s['steps']} steps on {s['n_train']} "
            f"training pairs of at most {s['max_len']} tokens; scored on {s['n_test']} "
            "pairs (kjv-rv: verses spread over the held-out books Josh, Prov, Acts, 1Cor): "
            f"teacher-forced token accuracy, and chrF of greedy translations of the first "
            f"{s['decode']}. "
            f"Speech ({s['speech']}): tfam's speech encoder (N={s['depth']}, truncated "
            f"attention of 16 frames each side, 2x subsampling) trained {s['speech_steps']} "
            f"steps of {s['speech_batch']} utterances to tag each 10 ms frame with its digit "
            "word or silence (SpecAugment), "
            f"scored on {s['speech_test']} utterances of held-out voices. "
            + ("The tiny profile runs stand-in data (the reverse task, synthetic frames): its "
               "numbers only check the code. " if ctx.profile == "tiny" else "")
            + f"Machine: {machine()}; the 2 cores are shared with other work."
        )  # fmt: skip

    def measure(self, ctx: Context) -> None:
        s = ctx.settings
        jobs = [(t, h, seed) for t in TASKS for seed in ctx.seeds for h in s["heads"]]
        data: dict[str, Any] = {}
        with ctx.progress.bar(len(jobs), "heads: train") as step:
            for task, heads, seed in jobs:
                key = f"{task}/heads={heads}/seed{seed}"
                if key not in ctx.store and task not in data:
                    data[task] = (
                        translation_data(
                            s["translation"], s["n_train"], s["n_test"], s["max_len"], s["vocab"]
                        )
                        if task == "translation"
                        else speech_data(s["speech"], s["speech_test"])
                    )
                if isinstance(data.get(task), str):
                    ctx.store.put(f"{task}_missing", data[task])
                    step(f"{task}: no data")
                    continue

                def run(task: str = task, heads: int = heads, seed: int = seed) -> dict[str, Any]:
                    if task == "translation":
                        return train_translation(data[task], s, seed, heads=heads)
                    sp = {**s, "steps": s["speech_steps"], "batch": s["speech_batch"]}
                    return train_speech(data[task], sp, seed,
                                        heads=heads)  # fmt: skip

                ctx.once(key, run)
                step(f"{task} H={heads} seed {seed}")

    def _values(self, ctx: Context, task: str, metric: str) -> dict[int, list[float]]:
        out: dict[int, list[float]] = {}
        for h in ctx.settings["heads"]:
            recs = [ctx.store.get(f"{task}/heads={h}/seed{sd}") for sd in ctx.seeds]
            if all(r is not None for r in recs):
                out[h] = [r[metric] for r in recs]
        return out

    def report(self, ctx: Context) -> tuple[list[Section], list[str]]:
        s = ctx.settings
        sections: list[Section] = []
        conclusions: list[str] = []
        acc = {t: self._values(ctx, t, "acc") for t in TASKS}
        chrf = self._values(ctx, "translation", "chrf")
        rows = []
        for h in s["heads"]:
            tr = ctx.store.get(f"translation/heads={h}/seed{ctx.seeds[0]}")
            sp = ctx.store.get(f"speech/heads={h}/seed{ctx.seeds[0]}")
            rows.append([
                h, s["dim"] // h,
                summarize(acc["translation"][h]).format(2, 100) if h in acc["translation"] else "-",
                summarize(chrf[h]).format(2) if h in chrf else "-",
                summarize(self._values(ctx, "translation", "loss")[h]).format(3)
                if h in chrf else "-",
                summarize(acc["speech"][h]).format(2, 100) if h in acc["speech"] else "-",
                tr["parameters"] if tr else "-", sp["parameters"] if sp else "-",
            ])  # fmt: skip
        png = ctx.figure("heads.png")
        _plot(s["heads"], acc, chrf, png)
        sections.append(Section(
            "Accuracy against the number of heads",
            md_table(["heads H", "Dh", "translation token acc (%)", "translation chrF",
                      "translation test loss", "speech frame acc (%)", "translation params",
                      "speech params"], rows)
            + f"\n\n![accuracy against heads]({png.name})",
        ))  # fmt: skip
        for task in TASKS:
            missing = ctx.store.get(f"{task}_missing")
            if missing:
                conclusions.append(f"{TASKS[task][0]}: not measured (no data here: {missing}).")
                continue
            vals = acc[task]
            if 1 not in vals or len(vals) < 2:
                continue
            best = max(vals, key=lambda h: summarize(vals[h]).mean)
            parts = [
                f"H={h} vs H=1: " + compare(vals[h], vals[1]).describe(
                    f"H={h}", "H=1", digits=2, scale=100, unit="points")
                for h in vals if h != 1
            ]  # fmt: skip
            better = [h for h in vals if h != 1 and compare(vals[h], vals[1]).counts
                      and compare(vals[h], vals[1]).diff > 0]  # fmt: skip
            worse = [h for h in vals if h != 1 and compare(vals[h], vals[1]).counts
                     and compare(vals[h], vals[1]).diff < 0]  # fmt: skip
            verdict = (
                f"more heads helped here: H in {better} beat one head"
                if better and not worse
                else f"the claim does not hold here: H in {worse} did worse than one head"
                + (f", H in {better} better" if better else "")
                if worse
                else "no difference was measured between one head and more heads here"
            )
            conclusions.append(
                f"{TASKS[task][0]}, {TASKS[task][2]}: best mean at H={best} "
                f"({summarize(vals[best]).format(2, 100)}); {verdict}. " + "; ".join(parts) + "."
            )
        if 1 in chrf and len(chrf) > 1:
            top = max((h for h in chrf if h != 1), key=lambda h: summarize(chrf[h]).mean)
            conclusions.append(
                f"translation chrF: best mean at H={top}; H={top} vs H=1: "
                + compare(chrf[top], chrf[1]).describe(f"H={top}", "H=1", digits=2)
                + "."
            )
        ctx.notes.append(
            "The parameter count does not change with H (the projections are D x D whatever "
            "the split), so the comparison is at equal size; what changes is Dh = D/H and the "
            "number of separate softmaxes. A short budget favours what learns fastest, not "
            "what is best at convergence: the full profile trains longer."
        )
        return sections, conclusions


def _plot(heads: list[int], acc: dict[str, dict[int, list[float]]],
          chrf: dict[int, list[float]], png: Any) -> None:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tfam.viz.figure import save_figure

    fig, axes = plt.subplots(1, 3, figsize=(11, 3.6))
    panels = [
        (acc["translation"], 100, "translation token acc (%)"),
        (chrf, 1, "translation chrF"),
        (acc["speech"], 100, "speech frame acc (%)"),
    ]
    for ax, (vals, scale, label) in zip(axes, panels):
        hs = [h for h in heads if h in vals]
        means = [scale * summarize(vals[h]).mean for h in hs]
        sds = [scale * summarize(vals[h]).std for h in hs]
        ax.errorbar(hs, means, yerr=sds, marker="o", capsize=3)
        ax.set_xscale("log", base=2)
        ax.set_xticks(heads, [str(h) for h in heads])
        ax.set_xlabel("heads H (same width D)")
        ax.set_ylabel(label)
    fig.suptitle("Heads at equal width: mean ± sd over seeds")
    fig.tight_layout()
    save_figure(fig, png)
    plt.close(fig)
