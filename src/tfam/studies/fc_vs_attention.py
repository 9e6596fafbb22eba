"""Study ``fc-vs-attention``: ``001_*`` says a fully connected tagger gives "saw" one tag in
"I saw a saw": it sees each word alone. A window of neighbours helps; self-attention sees the
whole sentence.

Part-of-speech tagging of the Turkish Web Treebank (word ids, :mod:`tfam.studies.tagging`)
with three taggers of the same width: a per-token MLP (the word alone), a windowed MLP (the
word and k neighbours on each side, concatenated) and a self-attention tagger (tfam's BERT
family, ``head='token'``, over the same word ids). Scored on every test token and on the
tokens of word types that take more than one tag in the training data; the per-token MLP's
count of distinct tags per ambiguous type shows it exactly (1: one tag whatever the context).
The majority tag of each word (no training) is the best any context-free tagger can do.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tfam.studies.base import Context, Profile, Section, Study, md_table, register_study
from tfam.studies.common import machine, seeded, train_steps
from tfam.studies.stats import compare, summarize
from tfam.studies.tagging import UNK, PosData, TokenMLP, batch, pos_data, tag_scores

__all__ = ["FCVsAttentionStudy", "build_tagger", "train_tagger"]

TAGGERS = {
    "token-mlp": "per-token MLP (the word alone)",
    "window-mlp": "windowed MLP (the word and k neighbours each side)",
    "attention": "self-attention tagger (tfam BERT, head='token')",
}


def build_tagger(kind: str, s: dict[str, Any], data: PosData, norm: str = "layernorm"
                 ) -> torch.nn.Module:  # fmt: skip
    """A tagger of width ``s['dim']``: 'token-mlp', 'window-mlp' (k = ``s['window']``) or
    'attention' (a BERT of ``s['depth']`` blocks, no dropout, norm ``norm``)."""
    vocab, tags = len(data.vocab), len(data.tags)
    if kind == "attention":
        from tfam.models import create_model

        return create_model("bert", vocab_size=vocab, dim=s["dim"], depth=s["depth"],
                            heads=s["heads"], ffn_dim=2 * s["dim"], max_positions=s["pad_to"],
                            head="token", num_labels=tags, dropout=0.0, attn_dropout=0.0,
                            norm=norm, type_vocab_size=1)  # fmt: skip
    window = s["window"] if kind == "window-mlp" else 0
    return TokenMLP(vocab, s["dim"], 2 * s["dim"], tags, window)


def logits_of(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, L, T) tag logits: a BERT reads the padding mask, an MLP does not need it."""
    if isinstance(model, TokenMLP):
        return model(ids)
    return model(ids, attention_mask=mask)


def train_tagger(model: torch.nn.Module, data: PosData, s: dict[str, Any], seed: int,
                 pad_to: int | None = None) -> tuple[float, float]:  # fmt: skip
    """``s['steps']`` AdamW steps on random batches of ``s['batch']`` training sentences
    (padded to the batch's longest, or to ``pad_to``); returns the last loss and seconds."""
    gen = seeded(seed)
    picks = torch.randint(0, len(data.train), (s["steps"], s["batch"]), generator=gen)

    def loss_of(i: int) -> torch.Tensor:
        ids, labels, mask = batch([data.train[j] for j in picks[i].tolist()], pad_to)
        logits = logits_of(model, ids, mask)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))

    losses, secs = train_steps(model, loss_of, s["steps"], s["lr"])
    return sum(losses[-10:]) / len(losses[-10:]), secs


def majority_scores(data: PosData) -> dict[str, float]:
    """Each word's most frequent training tag (the most frequent tag overall for UNK): the
    best a tagger that sees the word alone can do on words it has seen."""
    counts = torch.zeros(len(data.tags))
    for _, tags in data.train:
        counts += torch.bincount(torch.tensor(tags), minlength=len(data.tags))
    fallback = int(counts.argmax())
    table = torch.full((len(data.vocab),), fallback, dtype=torch.long)
    for w, t in data.majority.items():
        table[w] = t

    class Lookup(torch.nn.Module):
        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return F.one_hot(table[ids], len(data.tags)).float()

    return tag_scores(Lookup(), data, lambda m, ids, mask: m(ids))


@register_study
class FCVsAttentionStudy(Study):
    name = "fc-vs-attention"
    parallel = True  # independent training runs: tfam study --jobs N
    title = "A fully connected tagger, a windowed one, and self-attention on POS tagging"
    claim = (
        "001_* says a fully connected network tags each word alone, so the two 'saw's of "
        "'I saw a saw' get the same tag; a window of neighbours helps, and self-attention, "
        "which sees the whole sentence, tags words that take several tags best."
    )
    questions = ("001_*: a fully connected tagger gives 'saw' one tag",
                 "study 2 fc-vs-attention")  # fmt: skip
    profiles = {
        "tiny": Profile(
            dict(
                train=80,
                test=40,
                dim=16,
                depth=1,
                heads=2,
                window=2,
                steps=6,
                batch=8,
                lr=3e-3,
                pad_to=64,
            ),  # fmt: skip
            expected="~3 s",
        ),
        "quick": Profile(
            dict(
                train=None,
                test=None,
                dim=64,
                depth=2,
                heads=4,
                window=2,
                steps=600,
                batch=32,
                lr=2e-3,
                pad_to=64,
            ),  # fmt: skip
            expected="~2 min on a 2-core CPU",
            measured="98 s on the 2-core CPU beside one other single-thread study",
        ),
        "full": Profile(
            dict(
                train=None,
                test=None,
                dim=128,
                depth=4,
                heads=4,
                window=2,
                steps=4000,
                batch=32,
                lr=1e-3,
                pad_to=64,
            ),  # fmt: skip
            expected="~1.5 h (not measured)",
        ),
    }

    def setup(self, ctx: Context) -> str:
        s = ctx.settings
        return (
            "Turkish Web Treebank (its own train/test split; the treebank's tokens, 14 coarse "
            "tags; words seen once in train share UNK; sentences cut to 64 tokens"
            + (
                f"; the first {s['train']} train and {s['test']} test sentences"
                if s["train"]
                else ""
            )
            + "). "  # fmt: skip
            f"Taggers of width D={s['dim']}: per-token MLP (embedding -> Linear(D, 2D) -> GELU "
            f"-> Linear), windowed MLP (the 2k+1 = {2 * s['window'] + 1} embeddings around each "
            f"token concatenated, same MLP), self-attention (tfam BERT, {s['depth']} post-norm "
            f"blocks, {s['heads']} heads, FFN 2D, learned positions, head='token'). Each "
            f"trained {s['steps']} AdamW steps (batch {s['batch']} sentences, lr {s['lr']}, "
            "warmup 10%, linear decay). 'Ambiguous' = the test tokens whose word type takes "
            f"more than one tag in train. Machine: {machine()}; the 2 cores are shared with "
            "other work."
        )

    def measure(self, ctx: Context) -> None:
        s = ctx.settings
        data = pos_data(s["train"], s["test"])
        if isinstance(data, str):
            ctx.store.put("missing", data)
            return
        ctx.once("data", lambda: {
            "vocab": len(data.vocab), "train_sentences": len(data.train),
            "test_sentences": len(data.test), "ambiguous_types": len(data.ambiguous),
            "unk_test_tokens": sum(w == UNK for ids, _ in data.test for w in ids),
        })  # fmt: skip
        ctx.once("majority", lambda: majority_scores(data))
        jobs = [(k, seed) for seed in ctx.seeds for k in TAGGERS]
        with ctx.progress.bar(len(jobs), "fc-vs-attention: train") as step:
            for kind, seed in jobs:

                def run(kind: str = kind, seed: int = seed) -> dict[str, float]:
                    seeded(seed)
                    model = build_tagger(kind, s, data)
                    loss, secs = train_tagger(model, data, s, seed)
                    out = tag_scores(model, data, logits_of)
                    out.update(
                        train_loss=loss,
                        train_seconds=secs,
                        parameters=sum(p.numel() for p in model.parameters()),
                    )
                    return out

                ctx.once(f"{kind}/seed{seed}", run)
                step(f"{kind} seed {seed}")

    def report(self, ctx: Context) -> tuple[list[Section], list[str]]:
        if ctx.store.get("missing"):
            msg = ctx.store.get("missing")
            return [Section("Not run", msg)], [f"Not measured: {msg}."]
        d, maj = ctx.store.get("data"), ctx.store.get("majority")
        rec = {k: [ctx.store.get(f"{k}/seed{sd}") for sd in ctx.seeds] for k in TAGGERS}

        def col(k: str, m: str) -> list[float]:
            return [r[m] for r in rec[k]]

        rows = [["majority tag of the word (no training)", "-", f"{100 * maj['accuracy']:.2f}",
                 f"{100 * maj['ambiguous_accuracy']:.2f}", f"{maj['tags_per_ambiguous_type']:.2f}"]]  # fmt: skip
        for k, what in TAGGERS.items():
            rows.append([what, rec[k][0]["parameters"],
                         summarize(col(k, "accuracy")).format(2, 100),
                         summarize(col(k, "ambiguous_accuracy")).format(2, 100),
                         summarize(col(k, "tags_per_ambiguous_type")).format(2)])  # fmt: skip
        png = ctx.figure("fc_vs_attention.png")
        _plot({k: (col(k, "accuracy"), col(k, "ambiguous_accuracy")) for k in TAGGERS}, maj, png)
        sections = [
            Section(
                "Accuracy",
                f"{d['train_sentences']} train / {d['test_sentences']} test sentences, "
                f"{d['vocab']} word ids, {d['ambiguous_types']} ambiguous word types "
                f"({rec['token-mlp'][0]['ambiguous_tokens']} ambiguous test tokens), "
                f"{d['unk_test_tokens']} UNK test tokens.\n\n"
                + md_table(
                    [
                        "tagger",
                        "parameters",
                        "accuracy (%)",
                        "ambiguous words (%)",
                        "distinct tags per ambiguous type",
                    ],
                    rows,
                )  # fmt: skip
                + f"\n\n![accuracy overall and on ambiguous words]({png.name})",
            )
        ]
        one = col("token-mlp", "tags_per_ambiguous_type")
        conclusions = [
            "The per-token MLP gives each ambiguous word type "
            + (
                "exactly one tag in every context (1.00 distinct tags per type, every seed): "
                "001_*'s 'saw' claim holds exactly."
                if all(v == 1.0 for v in one)
                else f"{summarize(one).format(2)} distinct tags: NOT one tag per type here."
            )  # fmt: skip
        ]
        for a, b in (("window-mlp", "token-mlp"), ("attention", "token-mlp"),
                     ("attention", "window-mlp")):  # fmt: skip
            for metric, what in (("ambiguous_accuracy", "on ambiguous words"),
                                 ("accuracy", "overall")):  # fmt: skip
                c = compare(col(a, metric), col(b, metric))
                conclusions.append(
                    f"{what.capitalize()}: "
                    + c.describe(a, b, digits=2, scale=100, unit="points")
                    + "."
                )
        c = compare(col("token-mlp", "ambiguous_accuracy"), [maj["ambiguous_accuracy"]] * 2)
        conclusions.append(
            f"On ambiguous words the per-token MLP reaches "
            f"{100 * summarize(col('token-mlp', 'ambiguous_accuracy')).mean:.2f}% against "
            f"{100 * maj['ambiguous_accuracy']:.2f}% when each word gets its majority "
            "training tag (what a tagger that sees the word alone can aim for)."
            if c.se is not None
            else ""
        )
        return sections, [x for x in conclusions if x]


def _plot(acc: dict[str, tuple[list[float], list[float]]], maj: dict[str, float], png: Any
          ) -> None:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tfam.viz.figure import save_figure

    fig, ax = plt.subplots(figsize=(6, 3.8))
    names = list(acc)
    for j, (label, idx) in enumerate((("all tokens", 0), ("ambiguous words", 1))):
        means = [100 * summarize(acc[k][idx]).mean for k in names]
        sds = [100 * summarize(acc[k][idx]).std for k in names]
        ax.bar([i + 0.38 * j for i in range(len(names))], means, 0.36, yerr=sds, capsize=3,
               label=label)  # fmt: skip
    ax.axhline(100 * maj["ambiguous_accuracy"], color="grey", ls="--", lw=1,
               label="majority tag, ambiguous words")  # fmt: skip
    ax.set_xticks([i + 0.19 for i in range(len(names))], names)
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("POS tagging: MLP vs windowed MLP vs self-attention")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    save_figure(fig, png)
    plt.close(fig)
