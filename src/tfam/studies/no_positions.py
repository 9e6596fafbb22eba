"""Study ``no-positions``: ``004_*`` asks what goes wrong without positions, and ``001_*`` says
that without them the order is lost. Three parts:

1. Exactly: tfam's encoder (BERT, float64, no dropout) with ``position="none"`` is
   permutation-equivariant: encoding the tokens in a permuted order permutes the outputs,
   f(x[:, P]) = f(x)[:, P], up to float64 rounding (the keys' sum runs in another order);
   with each position scheme it is not (:func:`permutation_gap`).
2. Tagging: BERT tagging the Turkish treebank's parts of speech, without positions and with
   each scheme (token accuracy on the test split).
3. Translation: the encoder–decoder on a reduced King James -> Reina-Valera budget (as the
   ``heads`` study), without positions and with each scheme (token accuracy, chrF).
"""

from __future__ import annotations

from typing import Any

import torch

from tfam.studies.base import Context, Profile, Section, Study, md_table, register_study
from tfam.studies.common import machine
from tfam.studies.seqtasks import tagging_data, train_tagging, train_translation, translation_data
from tfam.studies.stats import compare, summarize

__all__ = ["NoPositionsStudy", "permutation_gap"]

# Every scheme over a 1-D sequence (what BERT and the Transformer accept), "none" first.
CHECK_SCHEMES = ("none", "sinusoidal", "learned", "rope", "alibi", "relative", "generated")


def permutation_gap(position: str, length: int = 12, seed: int = 0) -> dict[str, float]:
    """max |f(x[:, P]) − f(x)[:, P]| for tfam's BERT encoder (D=32, 4 heads, N=2, float64,
    eval mode) with ``position``, over a random (2, ``length``) id batch and a random
    permutation P; and max |f(x)| for scale."""
    from tfam.models import create_model

    torch.manual_seed(seed)
    model = create_model("bert", vocab_size=50, dim=32, depth=2, heads=4, ffn_dim=64,
                         max_positions=64, position=position, dropout=0.0,
                         attn_dropout=0.0).double().eval()  # fmt: skip
    # BERT's init is N(0, 0.02): scores near zero would make any scheme look equivariant.
    # Larger weights give sharp, token-dependent attention (the check is of the function).
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim >= 1:
                p.normal_(0.0, 0.3)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(1, 50, (2, length), generator=gen)
    perm = torch.randperm(length, generator=gen)
    with torch.no_grad():
        out = model(x)
        gap = float((model(x[:, perm]) - out[:, perm]).abs().max())
    return {"gap": gap, "scale": float(out.abs().max())}


@register_study
class NoPositionsStudy(Study):
    name = "no-positions"
    parallel = True  # independent training runs: tfam study --jobs N
    title = "Without positions: the encoder is permutation-equivariant, and scores fall"
    claim = (
        "001_* says self-attention alone has no notion of order (without positions it is "
        "lost), and 004_* asks what goes wrong without positional encoding; each position "
        "scheme should give the order back."
    )
    questions = (
        "001_*: without positions the order is lost",
        "004_* question 7 (what goes wrong without positions)",
        "study 6 no-positions",
    )
    profiles = {
        "tiny": Profile(
            dict(
                schemes=["none", "sinusoidal", "rope"],
                dim=16,
                depth=1,
                heads=2,
                steps=2,
                tag_steps=2,
                batch=8,
                lr=3e-3,
                translation="reverse",
                vocab=20,
                n_train=32,
                n_test=8,
                max_len=16,
                decode=4,
                tagging="synthetic",
                tag_train=32,
                tag_test=8,
                tag_max_len=16,
            ),  # fmt: skip
            expected="~4 s (stand-in data: the reverse task, synthetic tags)",
        ),
        "quick": Profile(
            dict(
                schemes=["none", "sinusoidal", "learned", "rope", "alibi"],
                dim=64,
                depth=2,
                heads=4,
                steps=120,
                tag_steps=100,
                batch=32,
                lr=2e-3,
                translation="kjv-rv",
                vocab=2000,
                n_train=6000,
                n_test=200,
                max_len=40,
                decode=50,
                tagging="turkish-pos",
                tag_train=3881,
                tag_test=200,
                tag_max_len=128,
            ),  # fmt: skip
            expected="~10 min (sized from measured step times)",
        ),
        "full": Profile(
            dict(
                schemes=["none", "sinusoidal", "learned", "rope", "alibi", "relative"],
                dim=64,
                depth=2,
                heads=4,
                steps=1800,
                tag_steps=1500,
                batch=64,
                lr=2e-3,
                translation="kjv-rv",
                vocab=2000,
                n_train=20000,
                n_test=500,
                max_len=40,
                decode=200,
                tagging="turkish-pos",
                tag_train=3881,
                tag_test=485,
                tag_max_len=128,
            ),  # fmt: skip
            # The heads study's full translation settings, sized from measured step times (on
            # docs/studies/heads.md): D=128, 3 blocks and 8,000 ids cost ~9x more a step.
            expected="~2 h on one thread (estimated from the heads study's step times; not run)",
        ),
    }

    def setup(self, ctx: Context) -> str:
        s = ctx.settings
        return (
            "Exact check: tfam's BERT encoder (D=32, 4 heads, N=2, float64, eval mode, "
            "weights N(0, 0.3) so attention is sharp), ids (2, 12), one random permutation, "
            f"for the schemes {', '.join(CHECK_SCHEMES)}. Training with the schemes "
            f"{s['schemes']}, width D={s['dim']}, {s['heads']} heads, N={s['depth']}, FFN 4D, "
            f"no dropout, AdamW (lr {s['lr']}, warmup 10%, linear decay), batch {s['batch']}. "
            f"Tagging ({s['tagging']}): BERT with a token head, {s['tag_steps']} steps on "
            f"{s['tag_train']} training sentences, token accuracy on {s['tag_test']} test "
            f"sentences. Translation ({s['translation']}): the encoder–decoder (post-norm), "
            f"{s['steps']} steps on {s['n_train']} pairs of at most {s['max_len']} tokens, "
            f"scored on {s['n_test']} held-out pairs (token accuracy; chrF of greedy "
            f"translations of the first {s['decode']}). A scheme acts on both the encoder and "
            "the decoder's self-attention; cross-attention never gets positions. "
            + ("The tiny profile runs stand-in data (the reverse task; synthetic tags that "
               "need the order): its numbers only check the code. "
               if ctx.profile == "tiny" else "")
            + f"Machine: {machine()}; the 2 cores are shared with other work."
        )  # fmt: skip

    def measure(self, ctx: Context) -> None:
        s = ctx.settings
        for scheme in CHECK_SCHEMES:
            ctx.once(f"equivariance/{scheme}", lambda scheme=scheme: permutation_gap(scheme))
        jobs = [(t, sc, seed) for t in ("tagging", "translation") for seed in ctx.seeds
                for sc in s["schemes"]]  # fmt: skip
        data: dict[str, Any] = {}
        with ctx.progress.bar(len(jobs), "no-positions: train") as step:
            for task, scheme, seed in jobs:
                key = f"{task}/{scheme}/seed{seed}"
                if key not in ctx.store and task not in data:
                    data[task] = (
                        translation_data(
                            s["translation"], s["n_train"], s["n_test"], s["max_len"], s["vocab"]
                        )
                        if task == "translation"
                        else tagging_data(s["tagging"], s["tag_train"], s["tag_test"])
                    )
                if isinstance(data.get(task), str):
                    ctx.store.put(f"{task}_missing", data[task])
                    step(f"{task}: no data")
                    continue

                def run(task: str = task, scheme: str = scheme, seed: int = seed) -> Any:
                    if task == "translation":
                        return train_translation(data[task], s, seed, heads=s["heads"],
                                                 position=scheme)  # fmt: skip
                    return train_tagging(data[task], s, seed, position=scheme)

                ctx.once(key, run)
                step(f"{task} {scheme} seed {seed}")

    def _values(self, ctx: Context, task: str, metric: str) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for sc in ctx.settings["schemes"]:
            recs = [ctx.store.get(f"{task}/{sc}/seed{sd}") for sd in ctx.seeds]
            if all(r is not None for r in recs):
                out[sc] = [r[metric] for r in recs]
        return out

    def report(self, ctx: Context) -> tuple[list[Section], list[str]]:
        s = ctx.settings
        sections: list[Section] = []
        conclusions: list[str] = []
        gaps = {sc: ctx.store.get(f"equivariance/{sc}") for sc in CHECK_SCHEMES}
        sections.append(Section(
            "Permutation equivariance, exactly",
            md_table(["position", "max |f(x[:, P]) - f(x)[:, P]|", "max |f(x)| (scale)"],
                     [[sc, f"{g['gap']:.2e}", f"{g['scale']:.2f}"] for sc, g in gaps.items()])
            + "\n\nfloat64 rounding is ~1e-16 per operation; the keys' sum runs in another "
            "order after a permutation, so 'equal' here means a gap at that level.",
        ))  # fmt: skip
        none_gap = gaps["none"]["gap"]
        others = {sc: g["gap"] for sc, g in gaps.items() if sc != "none"}
        exact = none_gap < 1e-12 and all(v > 1e-6 for v in others.values())
        conclusions.append(
            f"Without positions the encoder is permutation-equivariant: permuting the tokens "
            f"permutes the outputs (max gap {none_gap:.1e}, float64 rounding); with each scheme "
            f"it is not (smallest gap {min(others.values()):.2e}, "
            f"{min(others, key=others.get)})"
            + (": shown." if exact else ": NOT as expected here (see the table).")
        )
        acc = {t: self._values(ctx, t, "acc") for t in ("tagging", "translation")}
        chrf = self._values(ctx, "translation", "chrf")
        rows = []
        for sc in s["schemes"]:
            rows.append([
                sc,
                summarize(acc["tagging"][sc]).format(2, 100) if sc in acc["tagging"] else "-",
                summarize(acc["translation"][sc]).format(2, 100)
                if sc in acc["translation"] else "-",
                summarize(chrf[sc]).format(2) if sc in chrf else "-",
            ])  # fmt: skip
        png = ctx.figure("no_positions.png")
        _plot(s["schemes"], acc, chrf, png)
        sections.append(Section(
            "Scores without and with positions",
            md_table(["position", "tagging token acc (%)", "translation token acc (%)",
                      "translation chrF"], rows)
            + f"\n\n![scores by position scheme]({png.name})",
        ))  # fmt: skip
        for task, vals, name, scale, unit in (
            ("tagging", acc["tagging"], "tagging token accuracy", 100, "points"),
            ("translation", acc["translation"], "translation token accuracy", 100, "points"),
            ("translation", chrf, "translation chrF", 1, "chrF"),
        ):
            missing = ctx.store.get(f"{task}_missing")
            if missing:
                conclusions.append(f"{name}: not measured (no data here: {missing}).")
                continue
            if "none" not in vals or len(vals) < 2:
                continue
            rec = [sc for sc in vals if sc != "none" and compare(vals[sc], vals["none"]).counts
                   and compare(vals[sc], vals["none"]).diff > 0]  # fmt: skip
            parts = [compare(vals[sc], vals["none"]).describe(sc, "none", digits=2, scale=scale,
                                                               unit=unit)
                     for sc in vals if sc != "none"]  # fmt: skip
            n_other = len(vals) - 1
            verdict = (
                f"every scheme recovers it ({', '.join(rec)} above none)"
                if len(rec) == n_other
                else f"{', '.join(rec)} above none; the others: no gain measured"
                if rec
                else "no scheme measured above none here: the claim is not shown at this budget"
            )
            conclusions.append(f"{name}: {verdict}. " + "; ".join(parts) + ".")
        return sections, conclusions


def _plot(schemes: list[str], acc: dict[str, dict[str, list[float]]],
          chrf: dict[str, list[float]], png: Any) -> None:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tfam.viz.figure import save_figure

    fig, axes = plt.subplots(1, 3, figsize=(11, 3.6))
    panels = [(acc["tagging"], 100, "tagging token acc (%)"),
              (acc["translation"], 100, "translation token acc (%)"),
              (chrf, 1, "translation chrF")]  # fmt: skip
    for ax, (vals, scale, label) in zip(axes, panels):
        names = [sc for sc in schemes if sc in vals]
        means = [scale * summarize(vals[sc]).mean for sc in names]
        sds = [scale * summarize(vals[sc]).std for sc in names]
        colors = ["tab:red" if sc == "none" else "tab:blue" for sc in names]
        ax.bar(range(len(names)), means, yerr=sds, color=colors, capsize=3)
        ax.set_xticks(range(len(names)), names, rotation=30)
        ax.set_ylabel(label)
    fig.suptitle("Without positions (red) and with each scheme: mean ± sd over seeds")
    fig.tight_layout()
    save_figure(fig, png)
    plt.close(fig)
