"""Study ``block-mixing``: ``004_*`` question 9 asks what happens when encoder and decoder blocks
are mixed up. Three mix-ups, each against the right block, trained alike:

1. A GPT built from encoder blocks (no causal mask; :func:`set_causal` on tfam's GPT): in
   training, the token it must predict is in its input, so its training loss collapses; when it
   generates, that token does not exist yet. Measured: training loss, held-out loss with the
   whole window visible (as in training) and as generated (the next character read from the
   characters before it only: with the causal mask put back, which is what tfam's generate
   computes from its KV cache, and from the prefix alone, the whole prefix mixed both ways),
   and the share of generated words that are words of the training text
   (:func:`tfam.training.wordshare.sample_word_share`).
2. A BERT built from causal blocks (``set_causal(..., True)``) as a part-of-speech tagger on
   the Turkish treebank: a token sees no word to its right. Measured: tagging accuracy.
3. A decoder without cross-attention (:class:`NoCrossAttention` in each decoder block of
   tfam's encoder-decoder) on a translation-like task (``reverse``: a sequence of symbols ->
   the same reversed): it never reads the source. Measured: exact-match accuracy of greedy
   outputs and per-token accuracy; beside them a decoder-only GPT that reads the source as a
   prefix, to tell whether cross-attention or the source is what is missing.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tfam.studies.base import Context, Profile, Section, Study, md_table, register_study
from tfam.studies.common import machine, seeded, train_steps
from tfam.studies.stats import compare, summarize
from tfam.studies.textdata import CompactVocab, pad_rows

__all__ = ["BlockMixingStudy", "NoCrossAttention", "set_causal"]

IGNORE = -100


def set_causal(stack: nn.Module, causal: bool) -> None:
    """Make a :class:`~tfam.layers.block.TransformerStack` of self-attention blocks causal
    (decoder blocks) or not (encoder blocks): the one flag its blocks read. Refused for a stack
    whose position scheme gives a score bias (ALiBi, relative), which is built for one side."""
    if getattr(stack, "kind", None) != "encoder":
        raise ValueError("set_causal takes a stack of self-attention blocks (kind='encoder')")
    if stack.bias_provider is not None:
        raise ValueError(
            "set_causal: this stack's position scheme gives a score bias built for "
            f"causal={stack.causal}; use a scheme added to the tokens or RoPE"
        )
    stack.causal = causal


class NoCrossAttention(nn.Module):
    """Stands in for a decoder block's cross-attention and adds nothing: the block reads no
    source. (B, Lt, D) -> zeros (B, Lt, D), no weights."""

    def forward(self, x: Tensor, context: Any = None, **_: Any) -> tuple[Tensor, None]:
        return torch.zeros_like(x), None


def remove_cross_attention(model: nn.Module) -> None:
    """Every decoder block of an encoder-decoder Transformer without its cross-attention."""
    for block in model.decoder.blocks:
        block.cross_attn = NoCrossAttention()


# -- 1. GPT of encoder blocks ------------------------------------------------------------------
@functools.cache
def _kjv() -> tuple[Tensor, Tensor, int, Any, str] | str:
    """(train ids, test ids, vocabulary, tokenizer, training text) of the KJV characters, or
    why they are missing."""
    try:
        from tfam.data.sources.charlm import kjv_char_text, kjv_char_tokenizer

        tok = kjv_char_tokenizer()
        text = kjv_char_text("train")[:400_000]
        test = torch.tensor(tok.encode(kjv_char_text("test")[:200_000]), dtype=torch.long)
    except FileNotFoundError as err:
        return str(err).splitlines()[0]
    return torch.tensor(tok.encode(text), dtype=torch.long), test, tok.vocab_size, tok, text


def _lm_loss(logits: Tensor, labels: Tensor) -> Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                           ignore_index=IGNORE)  # fmt: skip


@torch.no_grad()
def prefix_only(model: nn.Module, x: Tensor) -> Tensor:
    """Logits (B, L, V) where position t is computed from x[:, : t + 1] alone (one forward per
    prefix): what a model that mixes both ways sees when it generates without a cache."""
    return torch.stack([model(x[:, : t + 1])[:, -1] for t in range(x.shape[1])], dim=1)


def gpt_run(s: dict[str, Any], seed: int, encoder_blocks: bool) -> dict[str, Any]:
    """Train a character GPT (with encoder blocks when asked) and measure it (module doc)."""
    from tfam.models import create_model
    from tfam.training.wordshare import sample_word_share

    train, test, vocab, tok, text = _kjv()  # type: ignore[misc]
    gen = seeded(seed)
    ctx = s["context"]
    model = create_model(
        "gpt", vocab_size=vocab, dim=s["dim"], depth=s["depth"], heads=s["heads"],
        max_positions=ctx, dropout=0.0, attn_dropout=0.0,
    )  # fmt: skip
    if encoder_blocks:
        set_causal(model.stack, False)
    starts = torch.randint(0, len(train) - ctx - 1, (s["lm_steps"], s["batch"]), generator=gen)
    offsets = torch.arange(ctx + 1)

    def loss_of(i: int) -> Tensor:
        chunk = train[starts[i][:, None] + offsets]
        return _lm_loss(model(chunk[:, :-1]), chunk[:, 1:])

    losses, seconds = train_steps(model, loss_of, s["lm_steps"], s["lr"])
    model.eval()
    n = s["eval_windows"]
    windows = torch.stack([test[i * ctx : i * ctx + ctx + 1] for i in range(n)])
    x, y = windows[:, :-1], windows[:, 1:]

    def scores(logits: Tensor) -> dict[str, float]:
        return {"loss": float(_lm_loss(logits, y)),
                "accuracy": float((logits.argmax(-1) == y).float().mean())}  # fmt: skip

    with torch.no_grad():
        seen = scores(model(x))  # the whole window visible, as in training
        set_causal(model.stack, True)  # the mask put back: what the KV cache computes
        masked = scores(model(x))
        set_causal(model.stack, not encoder_blocks)
        k = s["prefix_windows"]
        logits = prefix_only(model, x[:k])
        prefix = {"loss": float(_lm_loss(logits, y[:k])),
                  "accuracy": float((logits.argmax(-1) == y[:k]).float().mean())}  # fmt: skip
    words = sample_word_share(model, tok, text, samples=s["samples"], new_chars=s["new_chars"],
                              seed=seed)  # fmt: skip
    return {
        "train_loss": sum(losses[-10:]) / len(losses[-10:]),
        "seen": seen,
        "masked": masked,
        "prefix": prefix,
        "word_share": words["share"],
        "words": words["words"],
        "example": words["example"],
        "train_seconds": seconds,
    }


# -- 2. BERT of causal blocks ------------------------------------------------------------------
@functools.cache
def _treebank(train_split: str, train_rows: int, eval_rows: int, vocab: int) -> Any:
    """(train ids, train labels, test ids, test labels, CompactVocab, tags) of the Turkish
    treebank (MiniLM WordPiece, tag on each word's first piece), or why it is missing."""
    from tfam.data import resolve_data

    try:
        entry = resolve_data("turkish-pos")
        tr, te = entry.loader(train_split), entry.loader("test")
    except (FileNotFoundError, ImportError, ValueError) as err:
        return str(err).splitlines()[0]
    wp = tr.tokenizer
    specials = [wp.pad_id, wp.unk_id, wp.cls_id, wp.sep_id, wp.mask_id]
    tr_ids, tr_lab = tr.ids[:train_rows], tr.labels[:train_rows]
    cv = CompactVocab(tr_ids, vocab, specials, wp.unk_id)
    te_ids, te_lab = te.ids[:eval_rows], te.labels[:eval_rows]
    return ([cv.encode(r) for r in tr_ids], tr_lab, [cv.encode(r) for r in te_ids], te_lab, cv,
            tr.classes)  # fmt: skip


def tagger_run(s: dict[str, Any], seed: int, causal: bool) -> dict[str, Any]:
    """A small BERT tagger from scratch, bidirectional or causal; test accuracy over the
    tagged pieces (each word's first)."""
    from tfam.models import create_model

    tr_ids, tr_lab, te_ids, te_lab, cv, classes = _treebank(
        s["tag_split"], s["tag_rows"], s["tag_eval_rows"], s["tag_vocab"]
    )
    gen = seeded(seed)
    model = create_model(
        "bert", vocab_size=cv.size, dim=s["dim"], depth=s["depth"], heads=s["heads"],
        ffn_dim=4 * s["dim"], max_positions=128, head="token", num_labels=len(classes),
        dropout=0.0, attn_dropout=0.0, pad_token_id=0,
    )  # fmt: skip
    if causal:
        set_causal(model.encoder, True)
    picks = torch.randint(0, len(tr_ids), (s["tag_steps"], s["batch"]), generator=gen)

    def loss_of(i: int) -> Tensor:
        ids, mask = pad_rows([tr_ids[j] for j in picks[i]], 0)
        labels, _ = pad_rows([tr_lab[j] for j in picks[i]], IGNORE)
        return _lm_loss(model(ids, attention_mask=mask), labels)

    losses, seconds = train_steps(model, loss_of, s["tag_steps"], s["lr"])
    model.eval()
    right = total = 0
    with torch.no_grad():
        for start in range(0, len(te_ids), 128):
            ids, mask = pad_rows(te_ids[start : start + 128], 0)
            labels, _ = pad_rows(te_lab[start : start + 128], IGNORE)
            pred = model(ids, attention_mask=mask).argmax(-1)
            scored = labels != IGNORE
            right += int((pred[scored] == labels[scored]).sum())
            total += int(scored.sum())
    return {
        "accuracy": right / total,
        "tokens": total,
        "coverage": cv.coverage,
        "train_loss": sum(losses[-10:]) / len(losses[-10:]),
        "train_seconds": seconds,
    }


# -- 3. a decoder without cross-attention --------------------------------------------------------
@functools.cache
def _reverse(train_rows: int, eval_rows: int) -> Any:
    from tfam.data import resolve_data

    entry = resolve_data("reverse")
    tr, te = entry.loader("train"), entry.loader("test")
    pairs = lambda ds, n: [ds[i] for i in range(min(n, len(ds)))]  # noqa: E731
    return pairs(tr, train_rows), pairs(te, eval_rows), tr.vocab_size


TRANSLATORS = {
    "encoder-decoder": "encoder-decoder (cross-attention)",
    "no-cross": "decoder without cross-attention",
    "prefix-gpt": "decoder-only GPT, source as prefix",
}


def _prefix_rows(src: Tensor, tgt: Tensor) -> tuple[Tensor, Tensor]:
    """A decoder-only row: source (ending in <eos>) then target (<bos> ... <eos>); inputs all
    but the last id, labels the next id on the target's part only."""
    row = torch.cat([src, tgt])
    labels = row[1:].clone()
    labels[: len(src)] = IGNORE  # the source is read, not predicted
    return row[:-1], labels


def translator_run(s: dict[str, Any], seed: int, kind: str) -> dict[str, Any]:
    """Train one of :data:`TRANSLATORS` on ``reverse``; greedy exact match and per-token
    accuracy (teacher forcing) on held-out pairs."""
    from tfam.models import create_model

    train, test, vocab = _reverse(s["tr_rows"], s["tr_eval_rows"])
    gen = seeded(seed)
    size = dict(dim=s["dim"], depth=s["depth"], heads=s["heads"], ffn_dim=4 * s["dim"],
                dropout=0.0, attn_dropout=0.0)  # fmt: skip
    if kind == "prefix-gpt":
        model = create_model("gpt", vocab_size=vocab, max_positions=32, pad_token_id=0, **size)
    else:
        model = create_model("transformer", vocab_size=vocab, max_positions=32, **size)
        if kind == "no-cross":
            remove_cross_attention(model)
    picks = torch.randint(0, len(train), (s["tr_steps"], s["batch"]), generator=gen)

    def loss_of(i: int) -> Tensor:
        rows = [train[j] for j in picks[i]]
        if kind == "prefix-gpt":
            xs, ys = zip(*(_prefix_rows(a, b) for a, b in rows))
            return _lm_loss(model(pad_rows(xs, 0)[0]), pad_rows(ys, IGNORE)[0])
        src, _ = pad_rows([a for a, _ in rows], 0)
        tgt, _ = pad_rows([b for _, b in rows], 0)
        labels = tgt[:, 1:].masked_fill(tgt[:, 1:] == 0, IGNORE)
        return _lm_loss(model(src, tgt[:, :-1]), labels)

    losses, seconds = train_steps(model, loss_of, s["tr_steps"], s["lr"])
    model.eval()
    exact = right = total = 0
    by_len: dict[int, list[tuple[Tensor, Tensor]]] = {}
    for a, b in test:  # equal lengths in a group: no padding anywhere
        by_len.setdefault(len(a), []).append((a, b))
    with torch.no_grad():
        for group in by_len.values():
            src = torch.stack([a for a, _ in group])
            tgt = torch.stack([b for _, b in group])
            n = tgt.shape[1] - 1

            def step(out: Tensor, src: Tensor = src) -> Tensor:
                if kind == "prefix-gpt":
                    # logits at out's positions: position j scores out[j + 1]
                    return model(torch.cat([src, out], dim=1))[:, src.shape[1] :]
                return model(src, out)

            forced = step(tgt[:, :-1]).argmax(-1)
            right += int((forced == tgt[:, 1:]).sum())
            total += tgt[:, 1:].numel()
            out = tgt[:, :1]
            for _ in range(n):  # greedy, no cache: every step reads the whole output so far
                out = torch.cat([out, step(out)[:, -1:].argmax(-1)], dim=1)
            exact += int((out[:, 1:] == tgt[:, 1:]).all(dim=1).sum())
    return {
        "exact": exact / len(test),
        "token_accuracy": right / total,
        "train_loss": sum(losses[-10:]) / len(losses[-10:]),
        "train_seconds": seconds,
    }


@register_study
class BlockMixingStudy(Study):
    name = "block-mixing"
    parallel = True  # independent training runs: tfam study --jobs N
    title = "Encoder and decoder blocks mixed up: what breaks and how it shows"
    claim = (
        "004_* question 9 asks what happens when encoder and decoder blocks are mixed up: a GPT "
        "built from encoder blocks (no causal mask) sees the token it must predict, so its "
        "training loss collapses while its generations are nonsense; a BERT built from causal "
        "blocks loses the right context and tags worse; a decoder without cross-attention "
        "cannot translate."
    )
    questions = (
        "004_* question 9 (encoder and decoder blocks mixed up)",
        "004_* question 1 (encoder vs decoder blocks)",
        "study 10 block-mixing",
    )
    profiles = {
        "tiny": Profile(
            dict(
                dim=16,
                depth=1,
                heads=2,
                context=16,
                lm_steps=6,
                batch=8,
                lr=3e-3,
                eval_windows=4,
                prefix_windows=2,
                samples=2,
                new_chars=14,
                tag_split="val",
                tag_rows=40,
                tag_eval_rows=20,
                tag_vocab=300,
                tag_steps=4,
                tr_rows=64,
                tr_eval_rows=24,
                tr_steps=4,
            ),  # fmt: skip
            expected="~4 s",
        ),
        "quick": Profile(
            dict(
                dim=64,
                depth=2,
                heads=4,
                context=64,
                lm_steps=400,
                batch=32,
                lr=2e-3,
                eval_windows=64,
                prefix_windows=16,
                samples=8,
                new_chars=48,
                tag_split="train",
                tag_rows=3881,
                tag_eval_rows=485,
                tag_vocab=4000,
                tag_steps=300,
                tr_rows=10000,
                tr_eval_rows=500,
                tr_steps=400,
            ),  # fmt: skip
            expected="~6-7 min on a 2-core CPU",
            measured="354 s on the 2-core CPU beside one other single-thread study",
        ),
        "full": Profile(
            dict(
                dim=128,
                depth=4,
                heads=4,
                context=128,
                lm_steps=3000,
                batch=32,
                lr=1e-3,
                eval_windows=128,
                prefix_windows=32,
                samples=8,
                new_chars=100,
                tag_split="train",
                tag_rows=3881,
                tag_eval_rows=485,
                tag_vocab=8000,
                tag_steps=3000,
                tr_rows=10000,
                tr_eval_rows=500,
                tr_steps=3000,
            ),  # fmt: skip
            expected="~2 h (not measured)",
        ),
    }

    def setup(self, ctx: Context) -> str:
        s = ctx.settings
        return (
            f"Every model has width D={s['dim']}, {s['depth']} block(s), {s['heads']} heads, FFN "
            f"4D, no dropout, and is trained with AdamW (lr {s['lr']}, warm-up then linear "
            f"decay, batch {s['batch']}). (1) Character GPTs (tfam's GPT, learned positions) on "
            f"random {s['context']}-character windows of the KJV's training books, "
            f"{s['lm_steps']} steps, with causal blocks and with encoder blocks (the causal "
            "flag of the same stack off); held-out loss on "
            f"{s['eval_windows']} windows of the held-out books (the prefix-only loss on "
            f"{s['prefix_windows']} of them); {s['samples']} samples of {s['new_chars']} "
            "characters after 'And God said' (temperature 0.8, tfam's generate with its KV "
            "cache), scored by the share of their words found in the training text. (2) BERT "
            f"taggers (token head) on the Turkish treebank's {s['tag_split']} split (first "
            f"{s['tag_rows']} sentences), MiniLM WordPiece ids cut to the {s['tag_vocab']} most "
            f"frequent, {s['tag_steps']} steps; accuracy on the first {s['tag_eval_rows']} test "
            "sentences' tagged pieces. (3) `reverse` (3-12 of 16 symbols -> reversed; "
            f"{s['tr_rows']} training pairs, {s['tr_steps']} steps), scored on "
            f"{s['tr_eval_rows']} test pairs by greedy exact match and teacher-forced token "
            f"accuracy. Machine: {machine()}; the 2 cores are shared with other work."
        )

    def measure(self, ctx: Context) -> None:
        s = ctx.settings
        jobs: list[tuple[str, str, Any]] = []
        for seed in ctx.seeds:
            jobs += [(f"gpt/{k}/seed{seed}", "gpt", (k == "encoder-blocks", seed))
                     for k in ("causal", "encoder-blocks")]  # fmt: skip
            jobs += [(f"tagger/{k}/seed{seed}", "tag", (k == "causal", seed))
                     for k in ("bidirectional", "causal")]  # fmt: skip
            jobs += [(f"translate/{k}/seed{seed}", "tr", (k, seed)) for k in TRANSLATORS]
        missing = {}
        kjv = _kjv()
        if isinstance(kjv, str):
            missing["gpt"] = kjv
        bank = _treebank(s["tag_split"], s["tag_rows"], s["tag_eval_rows"], s["tag_vocab"])
        if isinstance(bank, str):
            missing["tag"] = bank
        for part, why in missing.items():
            ctx.store.put(f"missing/{part}", why)
        with ctx.progress.bar(len(jobs), "block-mixing") as step:
            for key, part, (arg, seed) in jobs:
                if part in missing:
                    step(key)
                    continue
                fn = {"gpt": gpt_run, "tag": tagger_run, "tr": translator_run}[part]
                ctx.once(key, lambda fn=fn, arg=arg, seed=seed: fn(s, seed, arg))
                step(key)

    def report(self, ctx: Context) -> tuple[list[Section], list[str]]:
        seeds = ctx.seeds
        get = ctx.store.get

        def vals(prefix: str, field: str, sub: str | None = None) -> list[float]:
            recs = [get(f"{prefix}/seed{sd}") for sd in seeds]
            return [r[field][sub] if sub else r[field] for r in recs]

        sections, conclusions = [], []
        fig: dict[str, Any] = {}
        if get("missing/gpt"):
            sections.append(Section("GPT of encoder blocks", f"Not run: {get('missing/gpt')}."))
            conclusions.append("The GPT part was not measured (no KJV text).")
        else:
            rows, g = [], {}
            for k in ("causal", "encoder-blocks"):
                p = f"gpt/{k}"
                g[k] = {
                    "train": vals(p, "train_loss"),
                    "seen": vals(p, "seen", "loss"),
                    "masked": vals(p, "masked", "loss"),
                    "prefix": vals(p, "prefix", "loss"),
                    "masked_acc": vals(p, "masked", "accuracy"),
                    # NaN when the samples hold no complete word: counted as 0 words known
                    "share": [0.0 if math.isnan(v) else v for v in vals(p, "word_share")],
                }
                f = lambda xs: summarize(xs).format(3)  # noqa: E731
                rows.append([k, f(g[k]["train"]), f(g[k]["seen"]), f(g[k]["masked"]),
                             f(g[k]["prefix"]), summarize(g[k]["masked_acc"]).format(1, 100),
                             summarize(g[k]["share"]).format(1, 100)])  # fmt: skip
            examples = "\n".join(
                f"- {k}: `{get(f'gpt/{k}/seed{seeds[0]}')['example']!r}`"
                for k in ("causal", "encoder-blocks")
            )
            sections.append(Section(
                "1. A GPT of encoder blocks",
                md_table(["blocks", "training loss", "held-out loss, window visible",
                          "held-out loss as generated (mask back)", "... (prefix only)",
                          "next-char accuracy as generated (%)", "generated words known (%)"],
                         rows)
                + "\n\nLosses in nats per character. 'As generated': each character predicted "
                "from the characters before it only, with the causal mask put back (what "
                "generate's KV cache computes) or from the prefix alone (every prefix run on "
                f"its own). Samples (seed {seeds[0]}):\n\n{examples}",
            ))  # fmt: skip
            fig["gpt"] = g
            c = compare(g["causal"]["train"], g["encoder-blocks"]["train"])
            conclusions.append(
                "Training loss: " + c.describe("causal blocks", "encoder blocks", unit="nats")
                + (" — the collapse the claim predicts." if c.counts and c.diff > 0 else
                   " — the predicted collapse was not measured.")
            )  # fmt: skip
            c = compare(g["encoder-blocks"]["masked"], g["causal"]["masked"])
            conclusions.append(
                "Held-out loss as generated (mask back): "
                + c.describe("encoder blocks", "causal blocks", unit="nats") + "."
            )  # fmt: skip
            c = compare(g["causal"]["share"], g["encoder-blocks"]["share"])
            conclusions.append(
                "Generated words found in the training text: "
                + c.describe("causal blocks", "encoder blocks", digits=1, scale=100,
                             unit="points") + "."
            )  # fmt: skip
        if get("missing/tag"):
            sections.append(Section("BERT of causal blocks", f"Not run: {get('missing/tag')}."))
            conclusions.append("The tagging part was not measured (no Turkish treebank).")
        else:
            acc = {k: vals(f"tagger/{k}", "accuracy") for k in ("bidirectional", "causal")}
            cov = get(f"tagger/causal/seed{seeds[0]}")["coverage"]
            sections.append(Section(
                "2. A BERT of causal blocks (POS tagging)",
                md_table(["blocks", "tagging accuracy (%)"],
                         [[k, summarize(v).format(2, 100)] for k, v in acc.items()])
                + f"\n\nThe compact vocabulary keeps {100 * cov:.1f}% of the training ids.",
            ))  # fmt: skip
            fig["tag"] = acc
            c = compare(acc["bidirectional"], acc["causal"])
            conclusions.append(
                "Tagging: " + c.describe("bidirectional blocks", "causal blocks", digits=2,
                                         scale=100, unit="points")
                + (": without the right context a BERT tags worse, as claimed."
                   if c.counts and c.diff > 0 else ".")
            )  # fmt: skip
        ex = {k: vals(f"translate/{k}", "exact") for k in TRANSLATORS}
        tok = {k: vals(f"translate/{k}", "token_accuracy") for k in TRANSLATORS}
        sections.append(Section(
            "3. A decoder without cross-attention (reverse)",
            md_table(["model", "exact match (%)", "token accuracy, teacher forcing (%)"],
                     [[TRANSLATORS[k], summarize(ex[k]).format(1, 100),
                       summarize(tok[k]).format(1, 100)] for k in TRANSLATORS])
            + "\n\nChance per token: 1/16 symbols (6.2%), though <eos> and the length are "
            "learnable without the source.",
        ))  # fmt: skip
        fig["tr"] = ex
        c = compare(ex["encoder-decoder"], ex["no-cross"])
        conclusions.append(
            "Translation (reverse), exact match: "
            + c.describe("the encoder-decoder", "the decoder without cross-attention",
                         digits=1, scale=100, unit="points")
            + f"; without cross-attention {100 * summarize(ex['no-cross']).mean:.1f}% of the "
            "outputs are right."
        )  # fmt: skip
        c = compare(ex["prefix-gpt"], ex["no-cross"])
        conclusions.append(
            "A decoder-only GPT that reads the source as a prefix: "
            + c.describe("the prefix GPT", "the decoder without cross-attention", digits=1,
                         scale=100, unit="points")
            + ("; so what the decoder lacks without cross-attention is the source, which "
               "self-attention over a prefix can read as well." if c.counts and c.diff > 0
               else ".")
        )  # fmt: skip
        png = ctx.figure("block_mixing.png")
        _plot(fig, png)
        sections[0].body += f"\n\n![block mixing]({png.name})"
        return sections, conclusions


def _plot(fig_data: dict[str, Any], png: Any) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tfam.viz.figure import save_figure

    parts = [p for p in ("gpt", "tag", "tr") if p in fig_data]
    fig, axes = plt.subplots(1, len(parts), figsize=(4.2 * len(parts), 3.8), squeeze=False)
    for ax, part in zip(axes[0], parts):
        d = fig_data[part]
        if part == "gpt":
            names = ["training", "held-out,\nwindow visible", "held-out,\nas generated"]
            width = 0.38
            for j, k in enumerate(("causal", "encoder-blocks")):
                ms = [summarize(d[k][f]) for f in ("train", "seen", "masked")]
                xs = [i + (j - 0.5) * width for i in range(3)]
                ax.bar(xs, [m.mean for m in ms], width, yerr=[m.std for m in ms], capsize=3,
                       label=k)  # fmt: skip
            ax.set_xticks(range(3), names, fontsize=8)
            ax.set_ylabel("loss (nats / character)")
            ax.set_title("1. GPT: causal vs encoder blocks")
            ax.legend(fontsize=8)
        else:
            keys = list(d)
            ms = [summarize(d[k]) for k in keys]
            ax.bar(range(len(keys)), [100 * m.mean for m in ms], yerr=[100 * m.std for m in ms],
                   capsize=3, color=["C0", "C1", "C2"][: len(keys)])  # fmt: skip
            ax.set_xticks(range(len(keys)), [k.replace("-", "-\n") for k in keys], fontsize=8)
            ax.set_ylabel("accuracy (%)" if part == "tag" else "exact match (%)")
            ax.set_title("2. BERT tagger" if part == "tag" else "3. reverse (translation)")
            lo = min(100 * m.mean for m in ms)
            if part == "tag" and not math.isnan(lo):
                ax.set_ylim(max(0.0, lo - 15), 100)
    fig.tight_layout()
    save_figure(fig, png)
    plt.close(fig)
