"""What the text datasets share: their splits, the facts a model needs before loading
(:class:`TextDatasetInfo`), the split of a held-out book, and :class:`TokenDataset`, the base of
datasets held as token ids (config facts, ``len``, ``repr``, right-padded batches).

    class MyTags(TokenDataset):          # sets self.tokenizer, self.name, self.ids, self.lengths
        def describe(self) -> str: ...   # one line; repr(ds) is "MyTags(<describe()>)"
    ids, mask = ds.pad_rows(ds.ids, [0, 2], ds.pad_token_id)   # (B, L) int64, (B, L) bool
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "TEXT_SPLITS",
    "TextDatasetInfo",
    "TokenDataset",
    "check_text_split",
    "split_of_book",
]

TEXT_SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class TextDatasetInfo:
    """What a text model needs to know about a dataset, without loading it: the tokenizer's
    vocabulary size and special ids, the classes and head of a classifier (the
    ``TASK_FACTS`` of its task), split sizes (examples: pairs, sentences or windows) and, for
    the user's files, ``max_length`` (the longest example's ids, every split)."""

    name: str
    vocab_size: int
    train_size: int
    test_size: int
    description: str
    pad_token_id: int = 0
    bos_token_id: int = 1
    eos_token_id: int = 2
    classes: tuple[str, ...] = ()  # no classes: DatasetEntry.classes reads it
    val_size: int | None = None
    num_labels: int | None = None  # classifiers: len(classes)
    head: str | None = None  # BERT's head for the task: "sequence", "token", "mlm"
    # The longest example's ids after the tokenizer, every split (a GPT's window): what a
    # model sized from the data needs; None where nobody measured it.
    max_length: int | None = None

    @classmethod
    def of_splits(
        cls,
        name: str,
        vocab_size: int,
        sizes: Mapping[str, int],
        description: str,
        *,
        classes: Sequence[str] = (),
        head: str | None = None,
    ) -> TextDatasetInfo:
        """The facts from the examples per split (``sizes["train"]``, ``["val"]``,
        ``["test"]``); a classifier (``classes`` given) has ``num_labels = len(classes)``."""
        return cls(
            name=name,
            vocab_size=vocab_size,
            train_size=sizes["train"],
            val_size=sizes["val"],
            test_size=sizes["test"],
            description=description,
            classes=tuple(classes),
            num_labels=len(classes) or None,
            head=head,
        )


def check_text_split(split: str) -> str:
    """``split`` when it is one of :data:`TEXT_SPLITS`; else a one-line ValueError."""
    if split not in TEXT_SPLITS:
        raise ValueError(f"split={split!r} is invalid: expected one of {', '.join(TEXT_SPLITS)}")
    return split


def split_of_book(book: str, val_books: Sequence[str], test_books: Sequence[str]) -> str:
    """The split ("train", "val" or "test") of a book (OSIS name) when whole books are held out."""
    if book in val_books:
        return "val"
    if book in test_books:
        return "test"
    return "train"


class TokenDataset:
    """Base of the text datasets held in memory as token ids.

    A subclass sets ``tokenizer``, ``name``, ``ids`` (a list of (L,) int64 tensors, one per
    example) and ``lengths``, and writes ``describe()`` (one line). It gets the facts a model config
    must equal (``vocab_size``, ``pad_token_id``), ``len`` (the examples in ``ids``), a
    ``repr`` built from ``describe()`` and :meth:`pad_rows` for its ``get_batch``.
    """

    tokenizer: Any  # a tfam Tokenizer (WordPiece, character, BPE)
    name: str
    ids: list[Tensor]
    lengths: list[int]

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def pad_token_id(self) -> int:
        return self.tokenizer.pad_id

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()})"  # type: ignore[attr-defined]

    @staticmethod
    def batch_index(indices: Sequence[int] | Tensor) -> list[int]:
        """``indices`` as a list of ints; a one-line ValueError when it is empty."""
        index = [int(i) for i in indices]
        if not index:
            raise ValueError("indices is empty: expected at least one row")
        return index

    def pad_rows(
        self, rows: Sequence[Tensor], index: Sequence[int], value: int
    ) -> tuple[Tensor, Tensor]:
        """``rows[i]`` for ``i`` in ``index`` right-padded with ``value`` to the longest of them:
        (B, L) int64, and the mask (B, L) bool, True on the rows' own entries."""
        length = max(self.lengths[i] for i in index)
        out = torch.full((len(index), length), value, dtype=torch.long)
        mask = torch.zeros(len(index), length, dtype=torch.bool)
        for row, i in enumerate(index):
            out[row, : self.lengths[i]] = rows[i]
            mask[row, : self.lengths[i]] = True
        return out, mask
