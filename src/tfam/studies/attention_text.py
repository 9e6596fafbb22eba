"""Study ``attention-text``: ``003_*`` says self-attention lets a model tie "it" to "animal" in
"The animal didn't cross the street because it was too tired". Three measurements:

1. The packaged MiniLM (all-MiniLM-L6-v2, tfam's ``minilm_l6``): the weight "it" gives every
   word of ``003_*``'s sentence, in every block and head (the figure ``tfam viz attention
   minilm_l6 SENTENCE --word it`` draws, here word by word), and in the same sentence with
   "tired" changed to "wide", where "it" is the street.
2. Pronoun pairs (Winograd-style: one word flips what "it" refers to): per block, the mean over
   heads of w(it -> A) - w(it -> B) when "it" is A, against the same when "it" is B. If
   attention follows the referent, the first is larger; the pairs are the samples.
3. ``tfam viz attention`` for every text family, drawn by the same functions: BERT (MiniLM),
   GPT (a character GPT trained here on the KJV: its causal mask leaves exactly zero weight on
   later tokens), the encoder–decoder (trained here to reverse a sequence: how often its
   cross-attention's largest weight lands on the mirrored source token).
"""

from __future__ import annotations

import functools
import re
from typing import Any

import torch
import torch.nn.functional as F

from tfam.studies.base import Context, Profile, Section, Study, md_table, register_study
from tfam.studies.common import machine, seeded, train_steps
from tfam.studies.stats import compare, summarize

__all__ = ["PAIRS", "SENTENCE", "AttentionTextStudy", "it_rows", "reversal_alignment", "words_of"]

SENTENCE = "The animal didn't cross the street because it was too tired."
CONTROL = "The animal didn't cross the street because it was too wide."
# (template, noun A, noun B, word that makes "it" A, word that makes "it" B)
PAIRS: tuple[tuple[str, str, str, str, str], ...] = (
    ("The animal didn't cross the street because it was too {}.", "animal", "street", "tired",
     "wide"),
    ("The trophy doesn't fit in the suitcase because it is too {}.", "trophy", "suitcase", "big",
     "small"),
    ("The table didn't go through the door because it was too {}.", "table", "door", "wide",
     "narrow"),
    ("The horse couldn't jump the fence because it was too {}.", "horse", "fence", "tired",
     "high"),
    ("The bird couldn't open the nut because it was too {}.", "bird", "nut", "weak", "hard"),
    ("The fish ate the worm because it was {}.", "fish", "worm", "hungry", "tasty"),
    ("The ball broke the window because it was too {}.", "ball", "window", "heavy", "fragile"),
    ("The bottle didn't fit in the bag because it was too {}.", "bottle", "bag", "large", "full"),
    ("The car couldn't pass the truck because it was too {}.", "car", "truck", "slow", "long"),
    ("The cat didn't eat the food because it was too {}.", "cat", "food", "full", "cold"),
    ("The boy couldn't carry the stone because it was too {}.", "boy", "stone", "young",
     "heavy"),
    ("The plant didn't grow in the pot because it was too {}.", "plant", "pot", "weak", "small"),
)  # fmt: skip


def words_of(sentence: str) -> list[str]:
    """Words and punctuation marks, a contraction kept whole ("didn't")."""
    return re.findall(r"\w+(?:'\w+)?|[^\w\s]", sentence)


def minilm_missing() -> str | None:
    """Why the packaged MiniLM cannot be loaded here (its finder's first line), or None."""
    from tfam.data.text.wordpiece import minilm_dir

    try:
        minilm_dir()
    except FileNotFoundError as err:
        return str(err).splitlines()[0]
    return None


@functools.lru_cache(maxsize=1)
def minilm() -> tuple[Any, Any]:
    """The packaged MiniLM and its tokenizer, loaded once a process (eval mode; callers do not
    change them)."""
    from tfam.data.text.wordpiece import minilm_tokenizer
    from tfam.models.registry import load_pretrained

    return load_pretrained("minilm_l6").eval(), minilm_tokenizer()


def it_rows(sentence: str) -> dict[str, Any]:
    """MiniLM's word-level attention of "it" in ``sentence``: the units' labels (words,
    [CLS], [SEP]) and rows (depth, H, U), the weight "it" gives each unit in each block and
    head (a word's pieces summed)."""
    from tfam.viz.text import future_mass, self_attention, word_attention, word_units

    model, tok = minilm()
    words = words_of(sentence)
    ids, word_ids = tok.encode_words(words)
    pieces = [str(tok.id_to_token(i)) for i in ids]
    units, _ = word_units(pieces, word_ids)
    labels = [words[word_ids[u[0]]] if word_ids[u[0]] is not None else pieces[u[0]]
              for u in units]  # fmt: skip
    query = labels.index("it")
    blocks = [word_attention(b, units) for b in self_attention(model, torch.tensor(ids))]
    rows = torch.stack([b[:, query, :] for b in blocks])  # (depth, H, U)
    full = torch.stack(blocks)  # (depth, H, U, U)
    return {"labels": labels, "query": query, "rows": rows.tolist(),
            "future_mass": future_mass(full),
            "blocks": full.tolist()}  # fmt: skip


def _noun_weights(rec: dict[str, Any], a: str, b: str) -> tuple[torch.Tensor, torch.Tensor]:
    rows = torch.tensor(rec["rows"])  # (depth, H, U)
    return rows[..., rec["labels"].index(a)], rows[..., rec["labels"].index(b)]


def pair_record(pair: tuple[str, str, str, str, str]) -> dict[str, Any]:
    """w(it -> A) and w(it -> B), (depth, H) each, in the A-version and the B-version."""
    template, a, b, adj_a, adj_b = pair
    out: dict[str, Any] = {}
    for version, adj in (("A", adj_a), ("B", adj_b)):
        rec = it_rows(template.format(adj))
        wa, wb = _noun_weights(rec, a, b)
        out[version] = {"to_a": wa.tolist(), "to_b": wb.tolist()}
    return out


def train_reversal(s: dict[str, Any], seed: int) -> tuple[Any, dict[str, float]]:
    """A small encoder–decoder (tfam's Transformer) trained to write its source backwards;
    returns it and its teacher-forced token accuracy on held-out sequences."""
    from tfam.models import create_model

    gen = seeded(seed)
    n, vocab = s["rev_length"], s["rev_vocab"]
    model = create_model(
        "transformer", vocab_size=vocab, dim=s["rev_dim"], depth=s["rev_depth"],
        heads=s["rev_heads"], ffn_dim=4 * s["rev_dim"], max_positions=n + 2, dropout=0.0,
        norm_first=True,
    )  # fmt: skip

    def batch(rows: int, g: torch.Generator) -> tuple[torch.Tensor, ...]:
        src = torch.randint(3, vocab, (rows, n), generator=g)  # 0 pad, 1 bos, 2 eos
        rev = src.flip(1)
        tgt_in = torch.cat([torch.ones(rows, 1, dtype=torch.long), rev], 1)
        tgt_out = torch.cat([rev, torch.full((rows, 1), 2, dtype=torch.long)], 1)
        return src, tgt_in, tgt_out

    def loss_of(i: int) -> torch.Tensor:
        src, tgt_in, tgt_out = batch(s["rev_batch"], gen)
        logits = model(src, tgt_in)
        return F.cross_entropy(logits.reshape(-1, vocab), tgt_out.reshape(-1))

    losses, seconds = train_steps(model, loss_of, s["rev_steps"], s["rev_lr"])
    src, tgt_in, tgt_out = batch(64, torch.Generator().manual_seed(10_000 + seed))
    model.eval()
    with torch.no_grad():
        acc = float((model(src, tgt_in).argmax(-1) == tgt_out).float().mean())
    return model, {"token_accuracy": acc, "final_loss": sum(losses[-5:]) / 5, "seconds": seconds}


def reversal_alignment(cross: torch.Tensor) -> float:
    """Share of target rows t < n of a reversal's cross-attention (H, n + 1, n), heads
    averaged, whose largest weight is on the mirrored source position n - 1 - t."""
    mean = cross.float().mean(0)
    n = mean.shape[-1]
    hits = mean[:n].argmax(-1) == torch.arange(n - 1, -1, -1)
    return float(hits.float().mean())


def family_gpt(s: dict[str, Any], seed: int, png: Any | None) -> dict[str, Any]:
    """A character GPT trained on the KJV; its self-attention over a verse (last block)."""
    from tfam.studies.positions import kjv_ids, train_char_gpt
    from tfam.viz.text import future_mass, plot_self_attention, self_attention

    data = kjv_ids()
    if isinstance(data, str):
        return {"skipped": data}
    train, _, vocab = data
    g = {"dim": s["gpt_dim"], "depth": s["gpt_depth"], "heads": s["gpt_heads"],
         "context": s["gpt_context"], "steps": s["gpt_steps"], "batch": 16, "lr": 2e-3}  # fmt: skip
    model, loss, seconds = train_char_gpt("rope", g, seed, train, vocab)
    from tfam.data.sources.charlm import kjv_char_tokenizer

    tok = kjv_char_tokenizer()
    text = "And God said, Let there be light"[: s["gpt_context"]]
    ids = tok.encode(text)
    blocks = self_attention(model, torch.tensor(ids))
    if png is not None:
        labels = [c if c != " " else "␣" for c in text]
        plot_self_attention(blocks[-1], labels, png, title="GPT (characters, KJV): self-attention",
                            layer_name=f"block {len(blocks)}/{len(blocks)}")  # fmt: skip
    below = max(float((b.sum(-1) - 1).abs().max()) for b in blocks)
    return {"future_mass": max(future_mass(b) for b in blocks), "row_sum_error": below,
            "final_loss": loss, "seconds": seconds}  # fmt: skip


def family_seq2seq(s: dict[str, Any], seed: int, png: Any | None) -> dict[str, Any]:
    """An encoder–decoder trained to reverse; its cross-attention alignment (last block)."""
    from tfam.viz import cross_attention, plot_alignment

    model, facts = train_reversal(s, seed)
    n = s["rev_length"]
    src = torch.arange(3, 3 + n) % (s["rev_vocab"] - 3) + 3
    tgt_in = torch.cat([torch.ones(1, dtype=torch.long), src.flip(0)])
    per_block = [reversal_alignment(cross_attention(model, src, tgt_in, layer=i))
                 for i in range(s["rev_depth"])]  # fmt: skip
    if png is not None:
        labels = [str(int(t)) for t in src]
        plot_alignment(cross_attention(model, src, tgt_in), labels,
                       [*labels[::-1], "<eos>"], png,
                       title="Encoder–decoder trained to reverse: cross-attention",
                       layer_name=f"decoder block {s['rev_depth']}/{s['rev_depth']}")  # fmt: skip
    return {**facts, "alignment": per_block, "chance": 1 / n}


@register_study
class AttentionTextStudy(Study):
    name = "attention-text"
    title = 'Attention over text: where "it" looks, and every text family\'s attention'
    claim = (
        '003_* says self-attention lets a model tie "it" to "animal" in "The animal didn\'t '
        'cross the street because it was too tired", folding the understanding of related '
        "words into the word it is processing."
    )
    questions = (
        '003_*: self-attention ties "it" to "animal"',
        "study 15 attention-text: `tfam viz attention` for every text family",
    )
    profiles = {
        "tiny": Profile(
            dict(
                pairs=2,
                gpt_dim=16,
                gpt_depth=1,
                gpt_heads=2,
                gpt_context=16,
                gpt_steps=5,
                rev_dim=16,
                rev_depth=1,
                rev_heads=2,
                rev_length=6,
                rev_vocab=12,
                rev_steps=5,
                rev_batch=8,
                rev_lr=3e-3,
            ),  # fmt: skip
            expected="~10 s (12 s of CPU measured on a loaded machine: MiniLM's load, 3 figures)",
        ),
        "quick": Profile(
            dict(
                pairs=len(PAIRS),
                gpt_dim=64,
                gpt_depth=2,
                gpt_heads=4,
                gpt_context=64,
                gpt_steps=300,
                rev_dim=64,
                rev_depth=2,
                rev_heads=4,
                rev_length=8,
                rev_vocab=16,
                rev_steps=1200,
                rev_batch=32,
                rev_lr=3e-3,
            ),  # fmt: skip
            expected="~3 min on a 2-core CPU",
            measured="172 s on the 2-core CPU beside one other single-thread job",
        ),
        "full": Profile(
            dict(
                pairs=len(PAIRS),
                gpt_dim=128,
                gpt_depth=4,
                gpt_heads=4,
                gpt_context=128,
                gpt_steps=3000,
                rev_dim=128,
                rev_depth=3,
                rev_heads=4,
                rev_length=12,
                rev_vocab=24,
                rev_steps=3000,
                rev_batch=64,
                rev_lr=1e-3,
            ),  # fmt: skip
            expected="~40 min (not measured)",
        ),
    }

    def setup(self, ctx: Context) -> str:
        s = ctx.settings
        return (
            "BERT: the packaged all-MiniLM-L6-v2 (tfam's `minilm_l6`: 6 blocks x 12 heads, "
            "WordPiece), deterministic, so seeds do not apply to it; word-level attention = "
            "the mean over a word's query pieces of the sum over its key pieces ([CLS] and "
            f"[SEP] kept as units). Pronoun pairs: {s['pairs']} sentence pairs in which one "
            'word flips what "it" refers to (the pairs are the samples). GPT: a character '
            f"GPT (D={s['gpt_dim']}, {s['gpt_depth']} block(s), {s['gpt_heads']} heads, RoPE, "
            f"context {s['gpt_context']}) trained {s['gpt_steps']} AdamW steps on the KJV "
            "(tfam.studies.positions.train_char_gpt). Encoder–decoder: tfam's Transformer "
            f"(D={s['rev_dim']}, {s['rev_depth']} + {s['rev_depth']} blocks, {s['rev_heads']} "
            f"heads, pre-norm) trained {s['rev_steps']} steps of {s['rev_batch']} random sequences of "
            f"{s['rev_length']} tokens (vocabulary {s['rev_vocab']}) to write them backwards. "
            f"Machine: {machine()}; the 2 cores are shared with other work."
        )

    def measure(self, ctx: Context) -> None:
        s = ctx.settings
        missing = minilm_missing()
        pairs = [] if missing else PAIRS[: s["pairs"]]
        total = 2 + len(pairs) + 2 * len(ctx.seeds)
        with ctx.progress.bar(total, "attention-text") as step:
            for key, sentence in (("sentence", SENTENCE), ("control", CONTROL)):
                if missing:
                    ctx.notes.append(f"MiniLM is not installed here ({missing}).")
                    step(key)
                    continue
                ctx.once(f"minilm/{key}", lambda t=sentence: it_rows(t))
                step(key)
            for i, pair in enumerate(pairs):
                ctx.once(f"pair/{i}", lambda p=pair: pair_record(p))
                step(f"pair {i}")
            for seed in ctx.seeds:
                first = seed == ctx.seeds[0]
                png = ctx.figure("gpt_attention.png") if first else None
                ctx.once(f"gpt/seed{seed}", lambda sd=seed, p=png: family_gpt(s, sd, p))
                step(f"gpt seed {seed}")
                png = ctx.figure("seq2seq_alignment.png") if first else None
                ctx.once(f"seq2seq/seed{seed}", lambda sd=seed, p=png: family_seq2seq(s, sd, p))
                step(f"seq2seq seed {seed}")

    def report(self, ctx: Context) -> tuple[list[Section], list[str]]:
        sections: list[Section] = []
        conclusions: list[str] = []
        sent = ctx.store.get("minilm/sentence")
        if sent is None:
            conclusions.append(f"The MiniLM parts were skipped: {minilm_missing()}.")
            sent = {"future_mass": float("nan")}
        else:
            self._minilm_sections(ctx, sent, sections, conclusions)
        self._family_section(ctx, sent, sections, conclusions)
        return sections, conclusions

    def _minilm_sections(
        self, ctx: Context, sent: dict, sections: list[Section], conclusions: list[str]
    ) -> None:
        from tfam.viz.text import plot_token_attention

        s = ctx.settings
        ctrl = ctx.store.get("minilm/control")
        labels = sent["labels"]
        blocks = [torch.tensor(b) for b in sent["blocks"]]
        png = ctx.figure("it_attention.png")
        plot_token_attention(
            blocks, labels, sent["query"], png,
            title="MiniLM: where \"it\" looks in 003_*'s sentence",
            mark=[labels.index("animal"), labels.index("street")],
        )  # fmt: skip
        wa, wb = _noun_weights(sent, "animal", "street")  # (depth, H)
        ca, cb = _noun_weights(ctrl, "animal", "street")
        depth, heads = wa.shape
        rows = []
        for layer in range(depth):
            top = int(wa[layer].argmax())
            rows.append([
                layer + 1, f"{float(wa[layer].mean()):.3f}", f"{float(wb[layer].mean()):.3f}",
                f"{top + 1} ({float(wa[layer, top]):.3f}; 'wide': {float(ca[layer, top]):.3f})",
                f"{float(ca[layer].mean()):.3f}", f"{float(cb[layer].mean()):.3f}",
            ])  # fmt: skip
        sections.append(Section(
            "MiniLM: the weight \"it\" gives \"animal\" and \"street\"",
            md_table(["block", "it->animal (mean of heads)", "it->street", "head most on "
                      "animal", "'wide': it->animal", "'wide': it->street"], rows)
            + f"\n\n![where it looks]({png.name})\n\nRows: where \"it\" looks in each block "
            "(heads down, words across; \"animal\" and \"street\" in red), in 003_*'s sentence "
            "with \"tired\". The last two columns: the same sentence with \"wide\", where \"it\" "
            "is the street.",
        ))  # fmt: skip
        more = int((wa > wb).sum())
        best = divmod(int(wa.argmax()), heads)
        conclusions.append(
            f"In 003_*'s sentence, \"it\" gives \"animal\" more weight than \"street\" in {more} "
            f"of MiniLM's {depth * heads} heads; the head that gives \"animal\" the most is block "
            f"{best[0] + 1} head {best[1] + 1} ({float(wa.max()):.3f}, against "
            f"{float(wb[best]):.3f} on \"street\"); with \"wide\" the same head gives "
            f"\"animal\" {float(ca[best]):.3f}. "
            + compare(wa.flatten().tolist(), wb.flatten().tolist()).describe(
                "it->animal", "it->street") + " over all heads."
        )  # fmt: skip
        # Pronoun pairs: per block, the mean over heads of w(it->A) - w(it->B) per version.
        pairs = [ctx.store.get(f"pair/{i}") for i in range(s["pairs"])]

        def pref(p: dict, version: str) -> torch.Tensor:  # (depth,) heads averaged
            return (torch.tensor(p[version]["to_a"]) - torch.tensor(p[version]["to_b"])).mean(-1)

        pa = torch.stack([pref(p, "A") for p in pairs])  # (pairs, depth)
        pb = torch.stack([pref(p, "B") for p in pairs])
        prow, follows = [], []
        for layer in range(depth):
            c = compare(pa[:, layer].tolist(), pb[:, layer].tolist())
            prow.append([layer + 1, summarize(pa[:, layer].tolist()).format(3),
                         summarize(pb[:, layer].tolist()).format(3),
                         "yes" if c.counts and c.diff > 0 else
                         ("reversed" if c.counts else "no difference measured")])  # fmt: skip
            if c.counts and c.diff > 0:
                follows.append(layer + 1)
        # The single head whose preference moves most with the referent (chosen after looking).
        ha = torch.stack([torch.tensor(p["A"]["to_a"]) - torch.tensor(p["A"]["to_b"])
                          for p in pairs])  # fmt: skip
        hb = torch.stack([torch.tensor(p["B"]["to_a"]) - torch.tensor(p["B"]["to_b"])
                          for p in pairs])  # fmt: skip
        shift = (ha - hb).mean(0)  # (depth, H)
        hl, hh = divmod(int(shift.argmax()), heads)
        hc = compare(ha[:, hl, hh].tolist(), hb[:, hl, hh].tolist())
        moving = [(layer + 1, h + 1) for layer in range(depth) for h in range(heads)
                  if (c := compare(ha[:, layer, h].tolist(), hb[:, layer, h].tolist())).counts
                  and c.diff > 0]  # fmt: skip
        sections.append(Section(
            "Pronoun pairs: does attention follow the referent?",
            md_table(["block", "w(it->A) - w(it->B) when it = A", "... when it = B",
                      "follows the referent"], prow)
            + f"\n\n{len(pairs)} pairs, e.g. \"{PAIRS[1][0].format(PAIRS[1][3])}\" (it = "
            f"{PAIRS[1][1]}) / \"{PAIRS[1][0].format(PAIRS[1][4])}\" (it = {PAIRS[1][2]}); heads "
            "averaged. Most-moving single head (picked after looking, so its difference is "
            f"biased upward): block {hl + 1} head {hh + 1}, "
            f"{summarize(ha[:, hl, hh].tolist()).format(3)} vs "
            f"{summarize(hb[:, hl, hh].tolist()).format(3)}. Heads whose own difference "
            f"exceeds twice its standard error toward the referent: {moving or 'none'}.",
        ))  # fmt: skip
        conclusions.append(
            f"Over {len(pairs)} pronoun pairs, MiniLM's heads-averaged attention from \"it\" "
            + (f"moves toward the referent in block(s) {follows} of {depth}" if follows else
               "does not move toward the referent in any block (no difference measured)")
            + f"; {len(moving)} of its {depth * heads} heads move toward it by more than twice "
            f"their standard error (about {0.023 * depth * heads:.1f} would by chance alone, "
            "at the one-sided 2.3% of a normal); the most-moving head, block "
            f"{hl + 1} head {hh + 1}: " + hc.describe("it = A", "it = B")
            + " (chosen after looking). "
            + ("003_*'s claim holds here for attention as a whole."
               if len(follows) == depth else
               "So the claim holds only for some heads, not for attention as a whole."
               if len(moving) > 0.023 * depth * heads else
               "So the claim does not hold here beyond what chance gives.")
        )  # fmt: skip

    def _family_section(
        self, ctx: Context, sent: dict, sections: list[Section], conclusions: list[str]
    ) -> None:
        gpt = [ctx.store.get(f"gpt/seed{sd}") for sd in ctx.seeds]
        seq = [ctx.store.get(f"seq2seq/seed{sd}") for sd in ctx.seeds]
        frows = [["BERT (MiniLM, 003_*'s sentence)", f"{sent['future_mass']:.3f}", "-", "-"]]
        if "skipped" not in gpt[0]:
            frows.append(["GPT (characters, KJV)",
                          f"{max(g['future_mass'] for g in gpt):.1e}",
                          summarize([g["final_loss"] for g in gpt]).format(3), "-"])  # fmt: skip
        last = [q["alignment"][-1] for q in seq]
        frows.append(["encoder–decoder (reversal), cross-attention", "-",
                      summarize([q["final_loss"] for q in seq]).format(3),
                      f"{summarize(last).format(3)} (chance {seq[0]['chance']:.3f}); token "
                      f"accuracy {summarize([q['token_accuracy'] for q in seq]).format(3)}"])  # fmt: skip
        figures = "![GPT](gpt_attention.png)\n\n" if "skipped" not in gpt[0] else ""
        sections.append(Section(
            "Every text family through `tfam viz attention`'s functions",
            md_table(["family", "largest weight on later tokens", "final training loss",
                      "alignment on the mirrored token (last block)"], frows)
            + "\n\n" + figures + "![encoder–decoder](seq2seq_alignment.png)\n\nThe same "
            "pictures from the command line: `tfam viz attention minilm_l6 SENTENCE [--word "
            "it]`, `tfam viz attention RUN_DIR SENTENCE` for a BERT or GPT run, and for an "
            "encoder–decoder run the cross-attention alignment.",
        ))  # fmt: skip
        if "skipped" not in gpt[0]:
            conclusions.append(
                f"The GPT's largest weight on a later token is "
                f"{max(g['future_mass'] for g in gpt):.1e} (its causal mask), BERT's "
                f"{sent['future_mass']:.3f}: only the encoder reads the right context."
            )
        else:
            conclusions.append(f"The GPT part was skipped: {gpt[0]['skipped']}.")
        c = compare(last, [seq[0]["chance"]] * len(last))
        conclusions.append(
            "The reversing encoder–decoder's cross-attention (last block, heads averaged) lands "
            f"its largest weight on the mirrored source token in {summarize(last).format(3)} of "
            f"the rows: {c.describe('alignment', 'chance')}."
        )
