"""Study ``embeddings``: ``001_*`` says one-hot vectors know no relation between words (cat and
dog are as far apart as cat and apple) and a word embedding carries meaning; ``003_*`` says the
Transformer's input vectors come from Word2Vec. Three vector sets for the same words:

- one-hot: word i is e_i; every two different words have cosine 0 (exactly);
- MiniLM's learned input embeddings (the packaged all-MiniLM-L6-v2's WordPiece table, a word =
  the mean of its pieces' rows), trained by its makers;
- skip-gram with negative sampling (Mikolov et al. 2013, Word2Vec), trained here on the KJV
  text (:func:`skipgram`), one set per seed.

Measured: the cosine of related against unrelated word pairs, nearest neighbours, and a
context-free tagger (an MLP on each word's vector alone) on the Turkish treebank's POS tags:
accuracy overall and on test words the tagger never saw tagged, where a one-hot vector is the
unknown (all zeros) and only a vector learned from other text can help. The tagger's skip-gram
vectors are trained on the treebank's words (all splits, without their tags): the KJV has no
Turkish.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tfam.studies.base import Context, Profile, Section, Study, md_table, register_study
from tfam.studies.common import machine, seeded, train_steps
from tfam.studies.stats import compare, summarize

__all__ = ["RELATED", "EmbeddingsStudy", "cosine_table", "skipgram", "unrelated_pairs"]

# Related pairs, all frequent in the KJV; unrelated pairs are built from them (unrelated_pairs).
RELATED: tuple[tuple[str, str], ...] = (
    ("god", "lord"), ("father", "mother"), ("son", "daughter"), ("brother", "sister"),
    ("king", "prince"), ("gold", "silver"), ("bread", "wine"), ("sheep", "oxen"),
    ("heaven", "earth"), ("day", "night"), ("man", "woman"), ("sword", "spear"),
)  # fmt: skip
PROBES = ("god", "king", "gold", "sheep", "day", "sword")
# 001_*'s own example words (cat is not in the KJV: MiniLM only).
DOCUMENT_WORDS = ("cat", "dog", "apple", "bag")


def unrelated_pairs(related: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    """Each pair's first word with the second word of the pair half the list away."""
    n = len(related)
    return [(related[i][0], related[(i + n // 2) % n][1]) for i in range(n)]


def cosine_table(vectors: Tensor, index: dict[str, int], pairs: list[tuple[str, str]]) -> list:
    """Cosine similarity of each pair's vectors (rows of ``vectors`` (V, d) by ``index``)."""
    v = F.normalize(vectors.float(), dim=-1)
    return [float(v[index[a]] @ v[index[b]]) for a, b in pairs]


def neighbours(vectors: Tensor, words: list[str], probe: str, k: int = 5) -> list[str]:
    """The ``k`` words whose vectors are nearest ``probe``'s by cosine (itself excluded)."""
    v = F.normalize(vectors.float(), dim=-1)
    i = words.index(probe)
    sims = v @ v[i]
    sims[i] = -2.0
    return [words[j] for j in sims.topk(k).indices.tolist()]


@functools.lru_cache(maxsize=2)
def kjv_words(limit: int) -> tuple[str, ...] | str:
    """The KJV training books' words, lower-cased, at most ``limit`` (or why the text is
    absent)."""
    try:
        from tfam.data.sources.charlm import kjv_char_text

        text = kjv_char_text("train")
    except FileNotFoundError as err:
        return str(err).splitlines()[0]
    return tuple(re.findall(r"[a-z]+", text.lower())[:limit])


def skipgram(
    words: tuple[str, ...] | list[str], s: dict[str, Any], seed: int
) -> tuple[Tensor, list[str], dict[str, float]]:
    """Skip-gram with negative sampling on ``words``: for a centre word c and a word o within
    ``s['window']`` of it, maximise log σ(u_o·v_c) + Σ_k log σ(−u_k·v_c) over ``s['negatives']``
    words k drawn from the unigram distribution to the 3/4 power (Mikolov et al. 2013, eq. 4);
    frequent words are subsampled (kept with probability sqrt(t / f), t = ``s['subsample']``,
    default 1e-4). Words seen
    fewer than ``s['min_count']`` times are dropped. -> (V, d) centre vectors, the vocabulary,
    and the last loss."""
    gen = seeded(seed)
    counts = Counter(words)
    vocab = sorted(w for w, c in counts.items() if c >= s["min_count"])
    index = {w: i for i, w in enumerate(vocab)}
    ids = torch.tensor([index[w] for w in words if w in index])
    freq = torch.tensor([counts[w] for w in vocab], dtype=torch.float64)
    keep = (s.get("subsample", 1e-4) / (freq / freq.sum())).sqrt().clamp(max=1.0)
    stream = ids[torch.rand(len(ids), generator=gen, dtype=torch.float64) < keep[ids]]
    noise = freq**0.75
    dim, win, neg, batch = s["sg_dim"], s["window"], s["negatives"], s["sg_batch"]
    centre = nn.Embedding(len(vocab), dim)
    nn.init.uniform_(centre.weight, -0.5 / dim, 0.5 / dim)
    context = nn.Embedding(len(vocab), dim)
    nn.init.zeros_(context.weight)
    model = nn.ModuleDict({"centre": centre, "context": context})

    def loss_of(i: int) -> Tensor:
        pos = torch.randint(win, len(stream) - win, (batch,), generator=gen)
        off = torch.randint(1, win + 1, (batch,), generator=gen)
        off = off * (torch.randint(0, 2, (batch,), generator=gen) * 2 - 1)
        c, o = stream[pos], stream[pos + off]
        k = torch.multinomial(noise, batch * neg, replacement=True, generator=gen).view(batch, neg)
        vc = centre(c)  # (B, d)
        pos_score = (context(o) * vc).sum(-1)  # (B,)
        neg_score = torch.einsum("bkd,bd->bk", context(k), vc)  # (B, K)
        return -(F.logsigmoid(pos_score) + F.logsigmoid(-neg_score).sum(-1)).mean()

    losses, seconds = train_steps(model, loss_of, s["sg_steps"], s["sg_lr"])
    return centre.weight.detach(), vocab, {"loss": sum(losses[-20:]) / len(losses[-20:]),
                                           "seconds": seconds}  # fmt: skip


@functools.lru_cache(maxsize=1)
def minilm_table() -> tuple[Tensor, Any]:
    """The packaged MiniLM's WordPiece input embeddings (30522, 384) and its tokenizer."""
    from tfam.data.text.wordpiece import minilm_tokenizer
    from tfam.models.registry import load_pretrained

    table = load_pretrained("minilm_l6").embed.tokens.weight.detach().clone()
    return table, minilm_tokenizer()


def minilm_vectors(words: list[str]) -> Tensor:
    """Each word's MiniLM vector: the mean of its WordPiece pieces' input embeddings."""
    table, tok = minilm_table()
    out = []
    for w in words:
        pieces = tok.encode(w)[1:-1] or [tok.unk_id]  # drop [CLS], [SEP]
        out.append(table[pieces].mean(0))
    return torch.stack(out)


def minilm_missing() -> str | None:
    from tfam.studies.attention_text import minilm_missing as missing

    return missing()


# -- the tagger ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def treebank(limit_train: int, limit_test: int) -> tuple[list, list] | str:
    """(train, test) lists of (lower-cased words, tags) sentences, or why absent."""
    try:
        from tfam.data.sources.treebank import treebank_sentences

        train = treebank_sentences("train")[:limit_train]
        test = treebank_sentences("test")[:limit_test]
        other = treebank_sentences("val")
    except FileNotFoundError as err:
        return str(err).splitlines()[0]

    def lower(sents: list) -> list:
        return [([w.lower() for w in x.words], list(x.tags)) for x in sents]

    return lower(train), lower(test) + [(ws, []) for ws, _ in lower(other)]


def tagger_accuracy(
    kind: str, data: tuple[list, list], s: dict[str, Any], seed: int
) -> dict[str, float]:
    """A context-free tagger (Linear -> ReLU -> Linear on each word's vector alone) fed
    ``kind`` vectors ('one-hot', 'minilm', 'skip-gram'): test accuracy overall, on words seen
    tagged in training, and on words never seen there."""
    from tfam.data.sources.treebank import TREEBANK_TAGS

    train, rest = data
    test = [(w, t) for w, t in rest if t]
    raw = [w for ws, _ in train for w in ws] + [w for ws, _ in rest for w in ws]
    tag_id = {t: i for i, t in enumerate(TREEBANK_TAGS)}
    seen = sorted({w for ws, _ in train for w in ws})
    gen = seeded(seed)
    hidden = s["tag_hidden"]
    if kind == "one-hot":
        # one_hot(word) @ W = W's row: an embedding table; an unseen word is the zero vector
        # (row 0, fixed at zero), the one-hot of no word in the training vocabulary.
        words = ["<unseen>", *seen]
        first: nn.Module = nn.Embedding(len(words), hidden, padding_idx=0)
        feats = None
    else:
        words = sorted(set(raw))
        if kind == "minilm":
            feats = minilm_vectors(words)
        else:
            vecs, vocab, _ = skipgram(raw, {**s, "min_count": 1, "sg_steps": s["tag_sg_steps"]},
                                      seed)  # fmt: skip
            at = {w: i for i, w in enumerate(vocab)}
            feats = vecs[[at[w] for w in words]]
        feats = feats / feats.norm(dim=-1, keepdim=True).clamp_min(1e-8)
        first = nn.Linear(feats.shape[1], hidden)
    index = {w: i for i, w in enumerate(words)}

    def encode(sents: list) -> tuple[Tensor, Tensor, Tensor]:
        ws = [w for x, _ in sents for w in x]
        ids = torch.tensor([index.get(w, 0) for w in ws])
        tags = torch.tensor([tag_id[t] for _, ts in sents for t in ts])
        unseen = torch.tensor([w not in set(seen) for w in ws])
        return ids, tags, unseen

    model = nn.Sequential(first, nn.ReLU(), nn.Linear(hidden, len(TREEBANK_TAGS)))

    def inputs(ids: Tensor) -> Tensor:
        return ids if feats is None else feats[ids]

    x, y, _ = encode(train)
    seen_set = set(seen)

    def loss_of(i: int) -> Tensor:
        pick = torch.randint(0, len(x), (s["tag_batch"],), generator=gen)
        return F.cross_entropy(model(inputs(x[pick])), y[pick])

    train_steps(model, loss_of, s["tag_steps"], s["tag_lr"])
    tx, ty, _ = encode(test)
    unseen = torch.tensor([w not in seen_set for ws, _ in test for w in ws])
    model.eval()
    with torch.no_grad():
        right = model(inputs(tx)).argmax(-1) == ty
    return {
        "accuracy": float(right.float().mean()),
        "seen": float(right[~unseen].float().mean()),
        "unseen": float(right[unseen].float().mean()) if unseen.any() else float("nan"),
        "unseen_share": float(unseen.float().mean()),
    }


TAGGER_KINDS = ("one-hot", "minilm", "skip-gram")


@register_study
class EmbeddingsStudy(Study):
    name = "embeddings"
    title = "One-hot against learned embeddings: similarities, neighbours, a tagger"
    claim = (
        "001_* says one-hot vectors know no relation between words (cat and dog are as "
        "unrelated as cat and apple) while a word embedding carries meaning; 003_* says the "
        "Transformer's word vectors come from Word2Vec."
    )
    questions = (
        "001_*: one-hot encoding has no relation between words; word embeddings do",
        "003_*: Word2Vec word vectors",
        "study 16 embeddings",
    )
    profiles = {
        "tiny": Profile(
            dict(
                kjv_words=60_000,
                min_count=3,
                sg_dim=16,
                window=2,
                negatives=3,
                sg_batch=128,
                sg_steps=30,
                sg_lr=0.02,
                tag_train=200,
                tag_test=60,
                tag_hidden=16,
                tag_steps=20,
                tag_batch=64,
                tag_lr=0.01,
                tag_sg_steps=20,
            ),  # fmt: skip
            expected="~7 s (7 s of CPU measured on a loaded machine, MiniLM's load included)",
        ),
        "quick": Profile(
            dict(
                kjv_words=800_000,
                min_count=5,
                sg_dim=64,
                window=4,
                negatives=5,
                sg_batch=1024,
                sg_steps=4000,
                sg_lr=0.01,
                tag_train=3881,
                tag_test=485,
                tag_hidden=128,
                tag_steps=1500,
                tag_batch=256,
                tag_lr=0.005,
                tag_sg_steps=3000,
            ),  # fmt: skip
            expected="~6 min on a quiet 2-core CPU (not measured quiet)",
            measured="2014 s on a 2-core CPU shared with 8 jobs (load average ~20, then ~2); "
            "about 4 min a seed once the load fell",
        ),
        "full": Profile(
            dict(
                kjv_words=800_000,
                min_count=5,
                sg_dim=100,
                window=5,
                negatives=10,
                sg_batch=2048,
                sg_steps=40_000,
                sg_lr=0.005,
                tag_train=3881,
                tag_test=485,
                tag_hidden=256,
                tag_steps=6000,
                tag_batch=256,
                tag_lr=0.003,
                tag_sg_steps=20_000,
            ),  # fmt: skip
            expected="~1 h (not measured)",
        ),
    }

    def setup(self, ctx: Context) -> str:
        s = ctx.settings
        return (
            f"KJV: the first {s['kjv_words']} lower-cased words of the training books. "
            f"Skip-gram: d={s['sg_dim']}, window {s['window']}, {s['negatives']} negatives, "
            f"words seen at least {s['min_count']} times, {s['sg_steps']} AdamW steps of "
            f"{s['sg_batch']} pairs (lr {s['sg_lr']}). MiniLM: the packaged all-MiniLM-L6-v2's "
            "input table (384-d), a word = the mean of its pieces. One-hot: cosine 0 between "
            "any two words, by construction. Related pairs: "
            + ", ".join(f"{a}-{b}" for a, b in RELATED)
            + "; unrelated: "
            + ", ".join(f"{a}-{b}" for a, b in unrelated_pairs(RELATED))
            + " (the pairs are "
            f"the samples). Tagger: Turkish treebank, {s['tag_train']} training and "
            f"{s['tag_test']} test sentences, Linear(d, {s['tag_hidden']}) -> ReLU -> Linear "
            f"on each word's vector alone, {s['tag_steps']} AdamW steps of {s['tag_batch']} "
            "words; its skip-gram vectors are trained on the treebank's words of all splits "
            f"(no tags; {s['tag_sg_steps']} steps), its MiniLM vectors are the pieces' mean. "
            f"Machine: {machine()}; the 2 cores are shared with other work."
        )

    def measure(self, ctx: Context) -> None:
        s = ctx.settings
        missing = minilm_missing()
        data = treebank(s["tag_train"], s["tag_test"])
        kinds = [k for k in TAGGER_KINDS if not (k == "minilm" and missing)]
        total = 1 + len(ctx.seeds) * (1 + len(kinds))
        with ctx.progress.bar(total, "embeddings") as step:
            if not missing:
                ctx.once("minilm", self._minilm)
            else:
                ctx.notes.append(f"MiniLM is not installed here ({missing}).")
            step("minilm")
            for seed in ctx.seeds:
                ctx.once(f"skipgram/seed{seed}", lambda sd=seed: self._skipgram(s, sd))
                step(f"skip-gram seed {seed}")
                for kind in kinds:
                    if isinstance(data, str):
                        ctx.once(f"tagger/{kind}/seed{seed}", lambda: {"skipped": data})
                    else:
                        ctx.once(f"tagger/{kind}/seed{seed}",
                                 lambda k=kind, sd=seed: tagger_accuracy(k, data, s, sd))  # fmt: skip
                    step(f"tagger {kind} seed {seed}")

    @staticmethod
    def _minilm() -> dict[str, Any]:
        words = sorted({w for p in RELATED for w in p} | set(DOCUMENT_WORDS))
        vecs = minilm_vectors(words)
        index = {w: i for i, w in enumerate(words)}
        doc = [("cat", "dog"), ("cat", "apple"), ("cat", "bag"), ("dog", "apple")]
        kjv = kjv_words(200_000)
        pool = [w for w, c in Counter(kjv).most_common(3000)] if not isinstance(kjv, str) else []
        pool_vecs = minilm_vectors(pool) if pool else None
        return {
            "related": cosine_table(vecs, index, list(RELATED)),
            "unrelated": cosine_table(vecs, index, unrelated_pairs(RELATED)),
            "document": {f"{a}-{b}": c for (a, b), c in zip(doc, cosine_table(vecs, index, doc))},
            "neighbours": {p: neighbours(pool_vecs, pool, p) for p in PROBES if p in pool}
            if pool_vecs is not None else {},
        }  # fmt: skip

    @staticmethod
    def _skipgram(s: dict[str, Any], seed: int) -> dict[str, Any]:
        words = kjv_words(s["kjv_words"])
        if isinstance(words, str):
            return {"skipped": words}
        vecs, vocab, facts = skipgram(words, s, seed)
        index = {w: i for i, w in enumerate(vocab)}
        rel = [p for p in RELATED if p[0] in index and p[1] in index]
        unrel = [p for p in unrelated_pairs(RELATED) if p[0] in index and p[1] in index]
        return {
            **facts, "vocab": len(vocab),
            "related": cosine_table(vecs, index, rel), "unrelated": cosine_table(vecs, index, unrel),
            "neighbours": {p: neighbours(vecs, vocab, p) for p in PROBES if p in index},
            "pairs": [f"{a}-{b}" for a, b in rel],
        }  # fmt: skip

    def report(self, ctx: Context) -> tuple[list[Section], list[str]]:
        sections: list[Section] = []
        conclusions: list[str] = []
        mini = ctx.store.get("minilm")
        sg = [ctx.store.get(f"skipgram/seed{sd}") for sd in ctx.seeds]
        sg_ok = "skipped" not in sg[0]
        rows = [["one-hot", "0 (every pair)", "0 (every pair)", "-"]]
        if mini:
            c = compare(mini["related"], mini["unrelated"])
            rows.append(["MiniLM input embeddings", summarize(mini["related"]).format(3),
                         summarize(mini["unrelated"]).format(3),
                         "yes" if c.counts and c.diff > 0 else "no"])  # fmt: skip
            conclusions.append("MiniLM's embeddings: " + c.describe("related pairs",
                               "unrelated pairs") + "; 001_*'s words: " + ", ".join(
                               f"cos({k}) = {v:.3f}" for k, v in mini["document"].items())
                               + " (one-hot: 0 for all of them).")  # fmt: skip
        if sg_ok:
            c0 = compare(sg[0]["related"], sg[0]["unrelated"])
            gaps = [summarize(r["related"]).mean - summarize(r["unrelated"]).mean for r in sg]
            rows.append([f"skip-gram on the KJV (seed {ctx.seeds[0]})",
                         summarize(sg[0]["related"]).format(3),
                         summarize(sg[0]["unrelated"]).format(3),
                         "yes" if c0.counts and c0.diff > 0 else "no"])  # fmt: skip
            conclusions.append(
                f"Skip-gram on the KJV (seed {ctx.seeds[0]}): "
                + c0.describe("related pairs", "unrelated pairs") + "; the related−unrelated "
                f"gap over seeds: {summarize(gaps).format(3)} ("
                + compare(gaps, [0.0] * len(gaps)).describe("the gap", "zero") + ")."
            )  # fmt: skip
        else:
            conclusions.append(f"Skip-gram was skipped: {sg[0]['skipped']}.")
        conclusions.insert(0, "One-hot vectors give cosine 0 to every pair of different words "
                           "(exactly, by construction): related and unrelated pairs look alike, "
                           "as 001_* says.")  # fmt: skip
        nb = []
        for p in PROBES:
            nb.append([p, ", ".join(mini["neighbours"].get(p, [])) if mini else "-",
                       ", ".join(sg[0]["neighbours"].get(p, [])) if sg_ok else "-"])  # fmt: skip
        png = ctx.figure("embeddings.png")
        taggers = {k: [ctx.store.get(f"tagger/{k}/seed{sd}") for sd in ctx.seeds]
                   for k in TAGGER_KINDS if ctx.store.get(f"tagger/{k}/seed{ctx.seeds[0]}")}  # fmt: skip
        taggers = {k: v for k, v in taggers.items() if "skipped" not in v[0]}
        self._plot(mini, sg[0] if sg_ok else None, taggers, png)
        sections.append(Section(
            "Cosine similarity of related and unrelated words",
            md_table(["vectors", "related pairs", "unrelated pairs", "related higher (2 SE)"],
                     rows)
            + f"\n\n![similarities and the tagger]({png.name})\n\n"
            + md_table(["word", "MiniLM's nearest (among the KJV's 3,000 commonest words)",
                        "skip-gram's nearest (KJV)"], nb),
        ))  # fmt: skip
        if taggers:
            trows = []
            for k, recs in taggers.items():
                trows.append([k, summarize([r["accuracy"] for r in recs]).format(3),
                              summarize([r["seen"] for r in recs]).format(3),
                              summarize([r["unseen"] for r in recs]).format(3)])  # fmt: skip
            share = next(iter(taggers.values()))[0]["unseen_share"]
            sections.append(Section(
                "A context-free tagger fed each (Turkish POS, test words)",
                md_table(["vectors", "accuracy", "on words seen tagged", "on unseen words"],
                         trows)
                + f"\n\n{share:.1%} of the test words were never seen tagged in training.",
            ))  # fmt: skip
            one = [r["unseen"] for r in taggers.get("one-hot", [])]
            for k in ("minilm", "skip-gram"):
                if k in taggers and one:
                    other = [r["unseen"] for r in taggers[k]]
                    conclusions.append("Tagger, words never seen tagged: " + compare(
                        other, one).describe(k, "one-hot") + "; overall: " + compare(
                        [r["accuracy"] for r in taggers[k]],
                        [r["accuracy"] for r in taggers["one-hot"]]).describe(k, "one-hot")
                        + ".")  # fmt: skip
        else:
            conclusions.append("The tagger was skipped: the Turkish treebank is not installed.")
        return sections, conclusions

    @staticmethod
    def _plot(mini: dict | None, sg: dict | None, taggers: dict, png: Any) -> None:
        from matplotlib.figure import Figure

        from tfam.viz.figure import save_figure

        fig = Figure(figsize=(10, 4), layout="constrained")
        ax, bx = fig.subplots(1, 2)
        sets = [("one-hot", [0.0] * len(RELATED), [0.0] * len(RELATED))]
        if mini:
            sets.append(("MiniLM", mini["related"], mini["unrelated"]))
        if sg:
            sets.append(("skip-gram (KJV)", sg["related"], sg["unrelated"]))
        for i, (_name, rel, unrel) in enumerate(sets):
            ax.scatter([i - 0.12] * len(rel), rel, color="tab:green", s=14,
                       label="related" if i == 0 else None)  # fmt: skip
            ax.scatter([i + 0.12] * len(unrel), unrel, color="tab:red", s=14,
                       label="unrelated" if i == 0 else None)  # fmt: skip
        ax.set_xticks(range(len(sets)), [n for n, _, _ in sets])
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_ylabel("cosine similarity")
        ax.set_title("word pairs")
        ax.legend(fontsize=8)
        names = list(taggers)
        for j, field in enumerate(("accuracy", "seen", "unseen")):
            means = [summarize([r[field] for r in taggers[k]]) for k in names]
            bx.bar([i + (j - 1) * 0.27 for i in range(len(names))], [m.mean for m in means],
                   0.27, yerr=[m.std for m in means], capsize=2, label=field)  # fmt: skip
        bx.set_xticks(range(len(names)), names)
        bx.set_ylim(0, 1)
        bx.set_ylabel("test accuracy")
        bx.set_title("context-free POS tagger (Turkish)")
        bx.legend(fontsize=8)
        save_figure(fig, png)
