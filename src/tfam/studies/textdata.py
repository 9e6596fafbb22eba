"""What the text studies share: a compact vocabulary over a data set's WordPiece ids, and
right-padded batches of id rows.

A small model trained from scratch on a few thousand sentences cannot learn 30,522 MiniLM ids;
:class:`CompactVocab` keeps the ``size`` most frequent ids of the training rows (and the special
ids, which keep their places in front) and maps every other id to [UNK], so the embedding and
the output layer have ``size`` rows. Every condition of a study sees the same mapped ids.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["CompactVocab", "pad_rows"]


class CompactVocab:
    """``specials`` (ids kept first, in order: new ids 0, 1, ...) and the most frequent other
    ids of ``rows``, ``size`` in all; ``unk`` (one of ``specials``) takes every id left out.
    ``encode(row)`` maps a row of original ids, ``decode(row)`` maps back."""

    def __init__(self, rows: Sequence[Tensor], size: int, specials: Sequence[int], unk: int):
        if unk not in specials:
            raise ValueError(f"unk={unk} is invalid: expected one of specials {list(specials)}")
        if size <= len(specials):
            raise ValueError(f"size={size} is invalid: expected more than {len(specials)} ids")
        counts = Counter(int(i) for r in rows for i in r.tolist())
        for s in specials:
            counts.pop(int(s), None)
        kept = [int(s) for s in specials] + [i for i, _ in counts.most_common(size - len(specials))]
        self.original = torch.tensor(kept, dtype=torch.long)  # new id -> original id
        top = max(kept + [int(r.max()) for r in rows if r.numel()]) + 1
        self.table = torch.full((top,), kept.index(int(unk)), dtype=torch.long)
        self.table[self.original] = torch.arange(len(kept))
        self.size = len(kept)
        self.unk = kept.index(int(unk))
        # The share of the rows' ids (specials included) that keep their own id.
        total = sum(r.numel() for r in rows)
        mapped = sum(int((self.encode(r) != self.unk).sum()) for r in rows)
        self.coverage = mapped / max(1, total)

    def id(self, original: int) -> int:
        """The new id of one original id."""
        return int(self.table[original]) if original < len(self.table) else self.unk

    def encode(self, row: Tensor) -> Tensor:
        """Original ids (any shape) -> new ids; ids beyond the table are [UNK]."""
        out = torch.full_like(row, self.unk)
        inside = row < len(self.table)
        out[inside] = self.table[row[inside]]
        return out

    def decode(self, row: Tensor) -> Tensor:
        """New ids -> the original ids they stand for ([UNK] for the left-out ones)."""
        return self.original[row]


def pad_rows(rows: Sequence[Tensor], value: int) -> tuple[Tensor, Tensor]:
    """Rows of different lengths -> (B, L) right-padded with ``value``, and the bool mask
    (B, L), True = real."""
    ids = torch.nn.utils.rnn.pad_sequence(list(rows), batch_first=True, padding_value=value)
    lengths = torch.tensor([len(r) for r in rows])
    return ids, torch.arange(ids.shape[1])[None, :] < lengths[:, None]
