"""What the Long Range Arena–style data sets share (Tay et al. 2020, "Long Range Arena: A
Benchmark for Efficient Transformers"): sequences of token ids with one label each, generated
or cut once and held in memory, served as a sequence classifier's batches.

    ds = SequenceSet(rows, labels, classes, vocab=("<pad>", "<cls>", ...), name="listops:train")
    ids, label = ds[0]              # (L,) int64 = [<cls>] + the example's tokens, label int
    ds.get_batch([0, 1])            # input_ids (B, L), attention_mask (B, L) bool, labels (B,)

Every example starts with ``<cls>`` (id 1), which BERT's pooler reads; ``<pad>`` is id 0.
The three data sets are :mod:`tfam.data.sources.listops` (``listops``),
:mod:`tfam.data.sources.bytetext` (``lra-text``) and :mod:`tfam.data.sources.pathfinder`
(``pathfinder32``); none of them is LRA's own data (each module says how it differs).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["CLS_ID", "PAD_ID", "SPECIALS", "SequenceSet"]

PAD_ID, CLS_ID = 0, 1
SPECIALS = ("<pad>", "<cls>")


class SequenceSet:
    """Labelled token sequences, held as one right-padded (N, Lmax) int64 tensor.

    ``rows``: each example's token ids without ``<cls>`` (ids >= 2); the stored ids are
    ``[<cls>] + row``. ``ds[i]`` -> ``(ids (L_i,) int64, label int)``; ``get_batch`` pads to
    the longest row of the batch (input_ids (B, L), attention_mask (B, L) True = real token,
    labels (B,)). ``vocab``: the token names by id (``vocab_size = len(vocab)``);
    ``classes``: the label names; ``lengths``: ids per example, ``<cls>`` included.
    """

    pad_token_id = PAD_ID
    cls_token_id = CLS_ID

    def __init__(
        self,
        rows: Sequence[Sequence[int]] | Tensor,
        labels: Sequence[int] | Tensor,
        classes: Sequence[str],
        vocab: Sequence[str],
        *,
        name: str = "",
        texts: Sequence[str] | None = None,
    ) -> None:
        if len(rows) != len(labels):
            raise ValueError(f"rows has {len(rows)} items, labels {len(labels)}: expected equal")
        self.name = name
        self.classes = tuple(classes)
        self.vocab = tuple(vocab)
        self.labels = torch.as_tensor(labels, dtype=torch.long).reshape(-1)
        if len(self.labels) and not 0 <= int(self.labels.min()) <= int(self.labels.max()) < len(
            self.classes
        ):
            raise ValueError(f"labels are invalid: expected 0 .. {len(self.classes) - 1}")
        if isinstance(rows, Tensor):  # equal lengths: one tensor, no Python loop
            body = rows.to(torch.long)
            cls = torch.full((body.shape[0], 1), CLS_ID, dtype=torch.long)
            self.ids = torch.cat([cls, body], dim=1)
            self.lengths = torch.full((body.shape[0],), self.ids.shape[1], dtype=torch.long)
        else:
            self.lengths = torch.tensor([1 + len(r) for r in rows], dtype=torch.long)
            width = int(self.lengths.max()) if len(rows) else 1
            self.ids = torch.full((len(rows), width), PAD_ID, dtype=torch.long)
            self.ids[:, 0] = CLS_ID
            for i, row in enumerate(rows):
                self.ids[i, 1 : 1 + len(row)] = torch.as_tensor(row, dtype=torch.long)
        if self.ids.numel() and int(self.ids.max()) >= len(self.vocab):
            raise ValueError(f"token id {int(self.ids.max())} is not in vocab ({len(self.vocab)})")
        self.texts = list(texts) if texts is not None else None

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @property
    def num_labels(self) -> int:
        return len(self.classes)

    @property
    def max_length(self) -> int:
        """The longest example's ids, ``<cls>`` included."""
        return int(self.lengths.max()) if len(self) else 0

    def __len__(self) -> int:
        return self.ids.shape[0]

    def __getitem__(self, i: int) -> tuple[Tensor, int]:
        return self.ids[i, : int(self.lengths[i])], int(self.labels[i])

    def get_batch(self, indices: Sequence[int] | Tensor) -> dict[str, Tensor]:
        index = torch.as_tensor(indices, dtype=torch.long).reshape(-1)
        if index.numel() == 0:
            raise ValueError("indices is empty: expected at least one row")
        width = int(self.lengths[index].max())
        ids = self.ids[index, :width]
        mask = torch.arange(width) < self.lengths[index, None]
        return {"input_ids": ids, "attention_mask": mask, "labels": self.labels[index]}

    def class_counts(self) -> list[int]:
        """Examples per class, in ``classes`` order."""
        return torch.bincount(self.labels, minlength=len(self.classes)).tolist()

    def describe(self) -> str:
        counts = ", ".join(f"{c} {k}" for c, k in zip(self.classes, self.class_counts()))
        lengths = self.lengths.float()
        return (
            f"{self.name}: {len(self)} sequences ({counts}), {int(lengths.min())}-"
            f"{int(lengths.max())} ids (mean {float(lengths.mean()):.0f}) with <cls>, "
            f"vocabulary {self.vocab_size}"
        )

    def __repr__(self) -> str:
        return f"SequenceSet({self.describe()})"
