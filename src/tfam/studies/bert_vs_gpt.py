"""Study ``bert-vs-gpt``: ``004_*`` question 4 asks how BERT and GPT differ. The same corpus, the
same size, two objectives:

- BERT (tfam's BERT, ``head="mlm"``) pre-trained with masked-LM: BERT's masking rule,
  :meth:`tfam.training.tasks.masked_lm.MaskedLM.mask_batch` (15% of the tokens, of those 80%
  [MASK], 10% random, 10% kept), the rule ``tfam train bert --task mlm`` trains with;
- GPT (tfam's GPT) pre-trained with causal LM (next token).

Both read the movie-review sentences of the ``sentiment`` data set (its training split, labels
unused), as MiniLM WordPiece ids cut to a compact vocabulary (:class:`CompactVocab`), with the
same width, depth, heads, FFN, positions (learned), pre-norm blocks, GELU, steps, batch and
learning rate. Then:

1. a linear probe for the sentence's sentiment (logistic regression on frozen features: the
   mean of the hidden states over the sentence; for GPT also the last token's, the only one
   that has read the whole sentence), against the same networks untrained;
2. masked-token accuracy: one token per held-out sentence hidden and predicted, by BERT from
   both sides (the token replaced by [MASK]), by BERT from the left only (the sentence cut
   after a [MASK] in the token's place) and by GPT, which reads the left only by construction;
3. GPT's generations from [CLS] (BERT's objective gives no left-to-right generator).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tfam.studies.base import Context, Profile, Section, Study, md_table, register_study
from tfam.studies.common import machine, seeded, train_steps
from tfam.studies.stats import compare, summarize
from tfam.studies.textdata import CompactVocab, pad_rows

__all__ = ["BertVsGptStudy", "linear_probe", "masked_token_accuracy"]

IGNORE = -100


@functools.cache
def _corpus(split: str, train_rows: int, eval_rows: int, vocab: int, max_len: int) -> Any:
    """The sentiment sentences as compact ids: (``train_rows`` of ``split``, their labels,
    ``eval_rows`` test rows, their labels, CompactVocab, WordPiece tokenizer), or why they are
    missing. Rows are drawn in a fixed random order (the splits are stored by label)."""
    from tfam.data import resolve_data

    try:
        entry = resolve_data("sentiment")
        tr, te = entry.loader(split), entry.loader("test")
    except (FileNotFoundError, ImportError, ValueError) as err:
        return str(err).splitlines()[0]
    wp = tr.tokenizer
    specials = [wp.pad_id, wp.unk_id, wp.cls_id, wp.sep_id, wp.mask_id]

    def rows(ds: Any, n: int) -> tuple[list[Tensor], list[int]]:
        order = torch.randperm(len(ds), generator=torch.Generator().manual_seed(0))
        picked = [ds[int(i)] for i in order[:n]]
        # Cut long sentences, keeping [SEP] last.
        cut = [r if len(r) <= max_len else torch.cat([r[: max_len - 1], r[-1:]]) for r, _ in picked]
        return cut, [int(y) for _, y in picked]

    tr_rows, tr_y = rows(tr, train_rows)
    te_rows, te_y = rows(te, eval_rows)
    cv = CompactVocab(tr_rows, vocab, specials, wp.unk_id)
    return [cv.encode(r) for r in tr_rows], tr_y, [cv.encode(r) for r in te_rows], te_y, cv, wp


def _build(kind: str, s: dict[str, Any], vocab: int) -> nn.Module:
    from tfam.models import create_model

    size = dict(vocab_size=vocab, dim=s["dim"], depth=s["depth"], heads=s["heads"],
                ffn_dim=4 * s["dim"], max_positions=s["max_len"], position="learned",
                norm_first=True, activation="gelu", dropout=0.0, attn_dropout=0.0,
                pad_token_id=0)  # fmt: skip
    if kind == "bert":
        return create_model("bert", head="mlm", **size)
    return create_model("gpt", **size)


def _features(kind: str, model: nn.Module, rows: list[Tensor]) -> dict[str, Tensor]:
    """Frozen sentence features (N, D): 'mean' over the real tokens, and for GPT 'last' (the
    final token, [SEP])."""
    from tfam.models.bert import mean_pool

    out: dict[str, list[Tensor]] = {"mean": [], "last": []}
    model.eval()
    with torch.no_grad():
        for start in range(0, len(rows), 256):
            ids, mask = pad_rows(rows[start : start + 256], 0)
            h = model.forward_features(ids, attention_mask=mask)
            out["mean"].append(mean_pool(h, mask))
            last = mask.sum(1) - 1
            out["last"].append(h[torch.arange(len(ids)), last])
    feats = {k: torch.cat(v) for k, v in out.items()}
    return feats if kind == "gpt" else {"mean": feats["mean"]}


def linear_probe(
    x_train: Tensor, y_train: Tensor, x_test: Tensor, y_test: Tensor, l2: float = 1e-3
) -> float:
    """Logistic regression (standardised features, L2 ``l2``, L-BFGS) fitted on the training
    features; accuracy on the test features. x (N, D) float, y (N,) int classes."""
    mu, sd = x_train.mean(0), x_train.std(0).clamp(min=1e-6)
    a, b = ((x_train - mu) / sd).double(), ((x_test - mu) / sd).double()
    classes = int(max(y_train.max(), y_test.max())) + 1
    w = torch.zeros(a.shape[1], classes, dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(classes, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS(
        [w, bias], max_iter=100, tolerance_change=1e-7, line_search_fn="strong_wolfe"
    )

    def closure() -> Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(a @ w + bias, y_train) + l2 * (w**2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        return float(((b @ w + bias).argmax(-1) == y_test).double().mean())


def masked_token_accuracy(
    kind: str, model: nn.Module, rows: list[Tensor], where: list[int], mask_id: int
) -> dict[str, float]:
    """Row i's token at ``where[i]`` (1 <= t < len - 1) hidden and predicted. BERT: 'both'
    (the token replaced by [MASK], the whole row read) and 'left' (the row cut to its tokens
    before t, then [MASK]); GPT: 'left' (its logits at t - 1)."""
    targets = torch.tensor([int(r[t]) for r, t in zip(rows, where)])
    model.eval()
    found: dict[str, list[Tensor]] = {}
    with torch.no_grad():
        for start in range(0, len(rows), 256):
            part = range(start, min(start + 256, len(rows)))
            if kind == "gpt":
                ids, mask = pad_rows([rows[i] for i in part], 0)
                logits = model(ids, attention_mask=mask)
                at = torch.tensor([where[i] - 1 for i in part])
                found.setdefault("left", []).append(logits[torch.arange(len(part)), at].argmax(-1))
                continue
            both = []
            for i in part:
                r = rows[i].clone()
                r[where[i]] = mask_id
                both.append(r)
            left = [torch.cat([rows[i][: where[i]], torch.tensor([mask_id])]) for i in part]
            at = torch.tensor([where[i] for i in part])
            for name, batch in (("both", both), ("left", left)):
                ids, mask = pad_rows(batch, 0)
                logits = model(ids, attention_mask=mask)
                found.setdefault(name, []).append(logits[torch.arange(len(part)), at].argmax(-1))
    return {k: float((torch.cat(v) == targets).double().mean()) for k, v in found.items()}


def hidden_positions(rows: list[Tensor], unk: int) -> tuple[list[Tensor], list[int]]:
    """One inner position per row (not [CLS], not [SEP], not [UNK]: a token left out of the
    compact vocabulary is no word to guess), drawn from a fixed generator, so every model is
    asked the same tokens; rows without such a position are left out."""
    gen = torch.Generator().manual_seed(1000)
    kept, where = [], []
    for r in rows:
        inner = [t for t in range(1, len(r) - 1) if int(r[t]) != unk]
        if inner:
            kept.append(r)
            where.append(inner[int(torch.randint(len(inner), (1,), generator=gen))])
    return kept, where


def pretrain(kind: str, s: dict[str, Any], seed: int) -> dict[str, Any]:
    """Pre-train one model (module doc) and measure its probe, masked-token accuracy and (GPT)
    generations; the probe of the same network untrained too."""
    from tfam.training.tasks.masked_lm import MaskedLM

    tr, tr_y, te, te_y, cv, wp = _corpus(
        s["split"], s["rows"], s["eval_rows"], s["vocab"], s["max_len"]
    )
    gen = seeded(seed)
    model = _build(kind, s, cv.size)
    untrained = _build(kind, s, cv.size)
    untrained.load_state_dict(model.state_dict())
    cls, sep, mask_id = cv.id(wp.cls_id), cv.id(wp.sep_id), cv.id(wp.mask_id)
    mlm = MaskedLM(mask_token_id=mask_id, vocab_size=cv.size, pad_id=0, special_ids=(cls, sep))
    picks = torch.randint(0, len(tr), (s["steps"], s["batch"]), generator=gen)
    mask_gen = torch.Generator().manual_seed(seed)

    def loss_of(i: int) -> Tensor:
        ids, mask = pad_rows([tr[j] for j in picks[i]], 0)
        if kind == "bert":
            batch = mlm.mask_batch({"input_ids": ids, "attention_mask": mask}, mask_gen)
            logits = model(batch["input_ids"], attention_mask=mask)
            labels = batch["labels"]
        else:
            logits = model(ids[:, :-1])
            labels = ids[:, 1:].masked_fill(~mask[:, 1:], IGNORE)
        return F.cross_entropy(logits.reshape(-1, cv.size), labels.reshape(-1),
                               ignore_index=IGNORE)  # fmt: skip

    losses, seconds = train_steps(model, loss_of, s["steps"], s["lr"])
    y_tr, y_te = torch.tensor(tr_y[: s["probe_rows"]]), torch.tensor(te_y)
    probe = {}
    for name, net in (("trained", model), ("untrained", untrained)):
        f_tr, f_te = _features(kind, net, tr[: s["probe_rows"]]), _features(kind, net, te)
        for pool in f_tr:
            probe[f"{name}/{pool}"] = linear_probe(f_tr[pool], y_tr, f_te[pool], y_te)
    rows, where = hidden_positions(te, cv.unk)
    record: dict[str, Any] = {
        "parameters": sum(p.numel() for p in model.parameters()),
        "train_loss": sum(losses[-10:]) / len(losses[-10:]),
        "probe": probe,
        "masked": masked_token_accuracy(kind, model, rows, where, mask_id),
        "masked_rows": len(rows),
        "coverage": cv.coverage,
        "train_seconds": seconds,
    }
    if kind == "gpt":
        start = torch.full((s["samples"], 1), cls, dtype=torch.long)
        out = model.generate(start, max_new_tokens=s["max_len"] - 1, do_sample=True,
                             temperature=0.8, eos_token_id=sep,
                             generator=torch.Generator().manual_seed(seed))  # fmt: skip
        texts = []
        for row in out:
            ids = row[1:].tolist()
            ids = ids[: ids.index(sep)] if sep in ids else ids
            texts.append(wp.decode(cv.decode(torch.tensor(ids, dtype=torch.long)).tolist()))
        record["samples"] = texts
    return record


@register_study
class BertVsGptStudy(Study):
    name = "bert-vs-gpt"
    parallel = True  # independent training runs: tfam study --jobs N
    title = "BERT against GPT: masked-LM and causal-LM pre-training on the same corpus"
    claim = (
        "004_* question 4 asks how BERT and GPT differ: BERT pre-trains with masked-LM and reads "
        "both sides of a token, which suits understanding (classification); GPT pre-trains with "
        "causal LM, reads the left only, and generates."
    )
    questions = ("004_* question 4 (BERT vs GPT)", "study 11 bert-vs-gpt")
    profiles = {
        "tiny": Profile(
            dict(
                dim=16,
                depth=1,
                heads=2,
                max_len=24,
                split="val",
                rows=64,
                eval_rows=32,
                vocab=200,
                steps=4,
                batch=8,
                lr=3e-3,
                probe_rows=64,
                samples=2,
            ),  # fmt: skip
            expected="~3 s",
        ),
        "quick": Profile(
            dict(
                dim=64,
                depth=2,
                heads=4,
                max_len=64,
                split="train",
                rows=8454,
                eval_rows=1056,
                vocab=4000,
                steps=600,
                batch=32,
                lr=2e-3,
                probe_rows=4000,
                samples=6,
            ),  # fmt: skip
            expected="~6-7 min on a 2-core CPU",
            measured="396 s on the 2-core CPU beside one other single-thread study",
        ),
        "full": Profile(
            dict(
                dim=128,
                depth=4,
                heads=4,
                max_len=80,
                split="train",
                rows=8454,
                eval_rows=1056,
                vocab=8000,
                steps=5000,
                batch=32,
                lr=1e-3,
                probe_rows=8454,
                samples=8,
            ),  # fmt: skip
            expected="~2 h (not measured)",
        ),
    }

    def setup(self, ctx: Context) -> str:
        s = ctx.settings
        return (
            f"Corpus: {s['rows']} sentences of `sentiment`'s {s['split']} split (movie reviews; "
            f"labels unused in pre-training), MiniLM WordPiece ids cut to the {s['vocab']} most "
            f"frequent ([UNK] for the rest), at most {s['max_len']} ids. Both models: D="
            f"{s['dim']}, {s['depth']} pre-norm blocks, {s['heads']} heads, FFN 4D, GELU, learned "
            f"positions, no dropout; {s['steps']} AdamW steps of {s['batch']} sentences (lr "
            f"{s['lr']}, warm-up then linear decay). BERT: masked-LM (MaskedLM.mask_batch: "
            "15% / 80-10-10, the rule of `tfam train bert --task mlm`); GPT: next token. "
            f"Probe: logistic regression (L-BFGS, L2 1e-3) on frozen features of {s['probe_rows']}"
            f" of those sentences, accuracy on {s['eval_rows']} test sentences. Masked-token "
            "accuracy: one random inner token per test sentence, never [UNK] (the same positions "
            f"for every model). Machine: {machine()}; the 2 cores are shared with other work."
        )

    def measure(self, ctx: Context) -> None:
        s = ctx.settings
        data = _corpus(s["split"], s["rows"], s["eval_rows"], s["vocab"], s["max_len"])
        if isinstance(data, str):
            ctx.store.put("missing", data)
            return
        jobs = [(k, seed) for seed in ctx.seeds for k in ("bert", "gpt")]
        with ctx.progress.bar(len(jobs), "bert-vs-gpt") as step:
            for kind, seed in jobs:
                ctx.once(f"{kind}/seed{seed}", lambda k=kind, sd=seed: pretrain(k, s, sd))
                step(f"{kind} seed {seed}")

    def report(self, ctx: Context) -> tuple[list[Section], list[str]]:
        seeds = ctx.seeds
        if ctx.store.get("missing"):
            why = ctx.store.get("missing")
            png = ctx.figure("bert_vs_gpt.png")
            _plot({}, {}, png)
            return [Section("Not run", f"No sentiment data here ({why}).\n\n![]({png.name})")], [
                "Nothing was measured: the sentiment sentences are missing."
            ]
        rec = {k: [ctx.store.get(f"{k}/seed{sd}") for sd in seeds] for k in ("bert", "gpt")}
        probe = {
            "BERT (MLM), mean": [r["probe"]["trained/mean"] for r in rec["bert"]],
            "GPT (causal), mean": [r["probe"]["trained/mean"] for r in rec["gpt"]],
            "GPT (causal), last token": [r["probe"]["trained/last"] for r in rec["gpt"]],
            "BERT untrained, mean": [r["probe"]["untrained/mean"] for r in rec["bert"]],
            "GPT untrained, mean": [r["probe"]["untrained/mean"] for r in rec["gpt"]],
            "GPT untrained, last token": [r["probe"]["untrained/last"] for r in rec["gpt"]],
        }
        masked = {
            "BERT, both sides": [r["masked"]["both"] for r in rec["bert"]],
            "BERT, left only": [r["masked"]["left"] for r in rec["bert"]],
            "GPT, left only": [r["masked"]["left"] for r in rec["gpt"]],
        }
        params = {k: rec[k][0]["parameters"] for k in rec}
        png = ctx.figure("bert_vs_gpt.png")
        _plot(probe, masked, png)
        samples = "\n".join(f"- `{t}`" for t in rec["gpt"][0]["samples"])
        sections = [
            Section(
                "Sentiment: a linear probe on frozen features",
                md_table(
                    ["features", "probe test accuracy (%)"],
                    [[k, summarize(v).format(1, 100)] for k, v in probe.items()],
                )
                + f"\n\nParameters: BERT {params['bert']:,} (its MLM head adds a dense layer "
                f"and a norm), GPT {params['gpt']:,}. Training loss (last 10 steps): BERT "
                f"{summarize([r['train_loss'] for r in rec['bert']]).format(3)} nats per masked "
                f"token, GPT {summarize([r['train_loss'] for r in rec['gpt']]).format(3)} nats "
                f"per token.\n\n![probe and masked tokens]({png.name})",
            ),  # fmt: skip
            Section(
                "Masked-token accuracy: both sides against the left only",
                md_table(
                    ["model, context", "accuracy (%)"],
                    [[k, summarize(v).format(1, 100)] for k, v in masked.items()],
                ),
            ),  # fmt: skip
            Section(f"GPT's generations (seed {seeds[0]}, temperature 0.8, from [CLS])", samples),
        ]
        conclusions = []
        c = compare(probe["BERT (MLM), mean"], probe["GPT (causal), mean"])
        conclusions.append(
            "Sentiment probe, mean-pooled features: "
            + c.describe("BERT", "GPT", digits=1, scale=100, unit="points") + "."
        )  # fmt: skip
        c = compare(probe["BERT (MLM), mean"], probe["GPT (causal), last token"])
        conclusions.append(
            "Sentiment probe, BERT's mean against GPT's last token: "
            + c.describe("BERT", "GPT", digits=1, scale=100, unit="points") + "."
        )  # fmt: skip
        for k, base in (("BERT (MLM), mean", "BERT untrained, mean"),
                        ("GPT (causal), mean", "GPT untrained, mean")):  # fmt: skip
            c = compare(probe[k], probe[base])
            conclusions.append(
                f"Pre-training's effect on the probe ({k.split(',')[0]}): "
                + c.describe("pre-trained", "untrained", digits=1, scale=100, unit="points") + "."
            )  # fmt: skip
        c = compare(masked["BERT, both sides"], masked["BERT, left only"])
        conclusions.append(
            "Masked tokens, BERT: "
            + c.describe("both sides", "the left only", digits=1, scale=100, unit="points")
            + "."
        )  # fmt: skip
        c = compare(masked["BERT, both sides"], masked["GPT, left only"])
        conclusions.append(
            "Masked tokens, BERT with both sides against GPT with the left: "
            + c.describe("BERT", "GPT", digits=1, scale=100, unit="points") + "."
        )  # fmt: skip
        c = compare(masked["GPT, left only"], masked["BERT, left only"])
        conclusions.append(
            "With the left context only: "
            + c.describe("GPT", "BERT", digits=1, scale=100, unit="points")
            + " (BERT's left-only input ends at its [MASK], a shape it never saw in training)."
        )  # fmt: skip
        return sections, conclusions


def _plot(probe: dict[str, list[float]], masked: dict[str, list[float]], png: Any) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tfam.viz.figure import save_figure

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, data, title in ((axes[0], probe, "sentiment probe (test accuracy)"),
                            (axes[1], masked, "masked-token accuracy")):  # fmt: skip
        keys = list(data)
        ms = [summarize(data[k]) for k in keys]
        ax.barh(range(len(keys)), [100 * m.mean for m in ms], xerr=[100 * m.std for m in ms],
                capsize=3, color=[f"C{i}" for i in range(len(keys))])  # fmt: skip
        ax.set_yticks(range(len(keys)), keys, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("%")
        ax.set_title(title)
    fig.tight_layout()
    save_figure(fig, png)
    plt.close(fig)
