"""Part-of-speech tagging data and the taggers tfam has no family for, shared by the
``fc-vs-attention`` and ``ln-vs-bn`` studies.

The Turkish Web Treebank's tokens (:func:`~tfam.data.sources.treebank.treebank_sentences`, its
own train/test split, 14 coarse tags) as word ids: lower-cased words seen at least
``min_count`` times in train get their own id, the rest share UNK (1); 0 pads. A word type is
*ambiguous* when the training data gives it more than one tag ("saw" in "I saw a saw").
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["PAD", "UNK", "PosData", "TokenMLP", "batch", "pos_data", "tag_scores"]

PAD, UNK = 0, 1
IGNORE = -100


@dataclass
class PosData:
    """Word and tag vocabularies, the sentences as (word ids, tag ids), and the ambiguous
    word ids (more than one tag in train) with their most frequent training tag."""

    vocab: list[str]
    tags: tuple[str, ...]
    train: list[tuple[list[int], list[int]]]
    test: list[tuple[list[int], list[int]]]
    ambiguous: set[int] = field(default_factory=set)
    majority: dict[int, int] = field(default_factory=dict)


def pos_data(max_train: int | None = None, max_test: int | None = None,
             max_len: int = 64, min_count: int = 2) -> PosData | str:  # fmt: skip
    """The treebank as word ids (sentences cut to ``max_len`` tokens; the first ``max_train``
    and ``max_test`` sentences), or a one-line reason when the treebank is not installed."""
    from tfam.data.sources.treebank import TREEBANK_INSTALL, TREEBANK_TAGS, treebank_sentences

    try:
        train_s, test_s = treebank_sentences("train"), treebank_sentences("test")
    except (FileNotFoundError, ImportError, OSError) as err:
        return f"no Turkish treebank ({TREEBANK_INSTALL}): {err}"
    train_s, test_s = train_s[:max_train], test_s[:max_test]
    counts = Counter(w.lower() for s in train_s for w in s.words)
    vocab = ["<pad>", "<unk>"] + sorted(w for w, c in counts.items() if c >= min_count)
    index = {w: i for i, w in enumerate(vocab)}
    tag_id = {t: i for i, t in enumerate(TREEBANK_TAGS)}

    def encode(sentences: list) -> list[tuple[list[int], list[int]]]:
        return [([index.get(w.lower(), UNK) for w in s.words[:max_len]],
                 [tag_id[t] for t in s.tags[:max_len]]) for s in sentences if s.words]  # fmt: skip

    train = encode(train_s)
    seen: dict[int, Counter] = defaultdict(Counter)
    for ids, tags in train:
        for w, t in zip(ids, tags, strict=True):
            if w != UNK:
                seen[w][t] += 1
    ambiguous = {w for w, c in seen.items() if len(c) > 1}
    majority = {w: c.most_common(1)[0][0] for w, c in seen.items()}
    return PosData(vocab, TREEBANK_TAGS, train, encode(test_s), ambiguous, majority)


def batch(sentences: list[tuple[list[int], list[int]]], pad_to: int | None = None
          ) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """ids (B, L) padded with PAD, labels (B, L) with -100 on padding, mask (B, L) True = real
    token; L is the longest sentence, or ``pad_to`` when that is longer."""
    length = max(max(len(ids) for ids, _ in sentences), pad_to or 0)
    ids = torch.full((len(sentences), length), PAD, dtype=torch.long)
    labels = torch.full((len(sentences), length), IGNORE, dtype=torch.long)
    for i, (w, t) in enumerate(sentences):
        ids[i, : len(w)] = torch.tensor(w)
        labels[i, : len(t)] = torch.tensor(t)
    return ids, labels, ids != PAD


class TokenMLP(nn.Module):
    """A fully connected tagger: the embeddings of a window of 2k+1 tokens around each token
    (k = ``window``; 0: the token alone), concatenated, through Linear -> GELU -> Linear.
    ids (B, L) -> logits (B, L, T). With k = 0 a word's tag cannot depend on its context."""

    def __init__(self, vocab: int, dim: int, hidden: int, tags: int, window: int = 0) -> None:
        super().__init__()
        self.window = window
        self.embed = nn.Embedding(vocab, dim, padding_idx=PAD)
        self.mlp = nn.Sequential(nn.Linear((2 * window + 1) * dim, hidden), nn.GELU(),
                                 nn.Linear(hidden, tags))  # fmt: skip

    def forward(self, ids: Tensor, mask: Tensor | None = None) -> Tensor:
        x = self.embed(ids)  # (B, L, D); padding embeds to 0
        k, length = self.window, ids.shape[1]
        if k:
            padded = F.pad(x, (0, 0, k, k))  # zeros beyond the sentence's ends
            x = torch.cat([padded[:, j : j + length] for j in range(2 * k + 1)], dim=-1)
        return self.mlp(x)


@torch.no_grad()
def tag_scores(model: nn.Module, data: PosData, forward, chunk: int = 64) -> dict[str, float]:
    """Accuracy on the test tokens: all, those of ambiguous word types, and the mean number of
    distinct tags the model gives an ambiguous type that occurs at least twice in test.
    ``forward(model, ids, mask)`` gives logits (B, L, T)."""
    model.eval()
    right = total = amb_right = amb_total = 0
    given: dict[int, set[int]] = defaultdict(set)
    occurs: Counter = Counter()
    for start in range(0, len(data.test), chunk):
        ids, labels, mask = batch(data.test[start : start + chunk])
        pred = forward(model, ids, mask).argmax(-1)
        ok = (pred == labels) & mask
        amb = mask & torch.tensor([[int(w) in data.ambiguous for w in row] for row in ids])
        right += int(ok.sum())
        total += int(mask.sum())
        amb_right += int((ok & amb).sum())
        amb_total += int(amb.sum())
        for w, p in zip(ids[amb].tolist(), pred[amb].tolist(), strict=True):
            given[w].add(p)
            occurs[w] += 1
    twice = [w for w in given if occurs[w] >= 2]
    return {
        "accuracy": right / max(total, 1),
        "ambiguous_accuracy": amb_right / max(amb_total, 1),
        "ambiguous_tokens": amb_total,
        "tags_per_ambiguous_type": sum(len(given[w]) for w in twice) / max(len(twice), 1),
    }
