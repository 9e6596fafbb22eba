"""Batches by token count, bucketed by length (``TrainConfig.batch_tokens``).

Sequences of very different lengths waste most of a padded batch; a fixed number of examples
per batch also makes the memory of a step follow the longest sentence. So, as in the
Transformer paper (batches of about 25,000 source and 25,000 target tokens), a batch here holds
as many examples as fit a token budget: its *padded* size, examples x the longest example's
length, is at most ``batch_tokens``.

The plan of an epoch (:func:`token_batches`):

1. draw a permutation with the trainer's data generator and sort it by length (a stable sort,
   so examples of equal length come in a fresh random order every epoch);
2. cut that order greedily into batches: a batch grows while its padded size stays within the
   budget, and holds at least ``min_examples`` (the number of processes, so that every process
   gets a share; only the epoch's last batch, of the longest examples, may hold fewer);
3. shuffle the order of the batches with the same generator.

How many batches there are depends only on the sorted lengths (step 2 reads nothing else), so
every epoch has the same number of optimiser steps and the learning-rate schedule knows the
total in advance (:func:`count_token_batches`). The plan is two tensors, the examples in batch
order and the batch offsets; the trainer keeps both in its checkpoint, so a resumed run takes
the same batches.

Loading a batch (:func:`load_batches`): the task's ``get_batch`` fast path, else a DataLoader
whose items are produced under seeds derived from (seed, epoch, index) (:class:`SeededItems`),
so worker processes need no state.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "EVAL_BATCH_TOKENS",
    "SeededItems",
    "count_token_batches",
    "dataset_lengths",
    "epoch_index_batches",
    "eval_index_batches",
    "load_batches",
    "pack_sorted",
    "token_batches",
]

# Padded tokens per evaluation batch of text data (TrainConfig.eval_batch_tokens, tfam eval):
# the (B, L, V) float32 logits of an 8,000-id vocabulary are then at most 131 MB, as in a
# training batch of kjv-rv (batch_tokens 4096).
EVAL_BATCH_TOKENS = 4096


def dataset_lengths(dataset: Any, batch_tokens: int, min_examples: int = 1) -> Tensor:
    """The dataset's per-example lengths (its ``lengths`` attribute) as an int64 tensor,
    checked against the token budget; one-line errors name what is wrong."""
    lengths = getattr(dataset, "lengths", None)
    if lengths is None:
        raise ValueError(
            f"batch_tokens={batch_tokens} is invalid for {type(dataset).__name__}: it has no "
            "lengths attribute (the token count of each example) to batch by"
        )
    lengths = torch.as_tensor(lengths, dtype=torch.int64).reshape(-1)
    if lengths.numel() != len(dataset):
        raise ValueError(
            f"batch_tokens={batch_tokens} is invalid for {type(dataset).__name__}: it has "
            f"{len(dataset)} examples but {lengths.numel()} lengths"
        )
    if lengths.numel() and int(lengths.min()) < 1:
        raise ValueError(
            f"batch_tokens={batch_tokens} is invalid for {type(dataset).__name__}: its lengths "
            f"must be >= 1, found {int(lengths.min())}"
        )
    longest = int(lengths.max()) if lengths.numel() else 0
    if batch_tokens < min_examples * longest:
        per = f" for each of {min_examples} processes" if min_examples > 1 else ""
        raise ValueError(
            f"batch_tokens={batch_tokens} is invalid: the longest example has {longest} tokens, "
            f"so a batch needs at least {min_examples * longest} (one example{per})"
        )
    return lengths


def pack_sorted(
    sorted_lengths: Sequence[int], batch_tokens: int, min_examples: int = 1
) -> list[int]:
    """Sizes of the greedy batches of lengths sorted ascending: a batch takes the next example
    while (examples + 1) x its length <= ``batch_tokens``, or while it has fewer than
    ``min_examples``. Only the last batch may hold fewer than ``min_examples`` (as a short last
    batch may with a fixed ``batch_size``); it cannot join the one before it, which closed
    because one more example would not fit."""
    sizes: list[int] = []
    count = 0
    for length in sorted_lengths:
        if count and (count + 1) * length > batch_tokens and count >= min_examples:
            sizes.append(count)
            count = 0
        count += 1
    if count:
        sizes.append(count)
    return sizes


def count_token_batches(lengths: Tensor, batch_tokens: int, min_examples: int = 1) -> int:
    """Batches per epoch: the same for every epoch (it depends only on the sorted lengths)."""
    return len(pack_sorted(torch.sort(lengths).values.tolist(), batch_tokens, min_examples))


def token_batches(
    lengths: Tensor, batch_tokens: int, generator: torch.Generator, min_examples: int = 1
) -> tuple[Tensor, Tensor]:
    """One epoch's plan: (order (N,), offsets (S + 1,)); batch ``b`` is
    ``order[offsets[b]:offsets[b + 1]]``. Draws two permutations from ``generator``."""
    n = lengths.numel()
    perm = torch.randperm(n, generator=generator)
    sorted_lengths, by_length = torch.sort(lengths[perm], stable=True)
    order = perm[by_length]
    sizes = pack_sorted(sorted_lengths.tolist(), batch_tokens, min_examples)
    batches = order.split(sizes)
    shuffle = torch.randperm(len(batches), generator=generator)
    order = torch.cat([batches[int(i)] for i in shuffle])
    counts = torch.tensor([sizes[int(i)] for i in shuffle], dtype=torch.int64)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)])
    return order, offsets


def eval_index_batches(
    n: int, batch_size: int, lengths: Any = None, batch_tokens: int | None = None
) -> list[Tensor]:
    """The evaluation batches of ``n`` examples, as index tensors covering each example once.

    Without ``lengths`` (or ``batch_tokens``): ``batch_size`` consecutive examples each, as
    before. With them (a text dataset): the examples sorted by length (a stable sort, so the
    plan is fixed) and cut greedily so that a batch holds at most ``batch_size`` examples and
    its padded size, examples x its longest length, stays within ``batch_tokens`` (a longer
    example than the budget goes alone). Evaluation memory then follows the tokens, not the
    longest sentence times ``batch_size``: the (B, L, V) logits of a seq2seq model over an
    8,000-id vocabulary are 8,000 x 4 bytes per padded token. A task's evaluation sums add up
    over any grouping of the examples, so only the batches change, not the metrics (loss sums
    up to float rounding)."""
    if n == 0:
        return []
    if lengths is None or batch_tokens is None:
        return [torch.arange(lo, min(lo + batch_size, n)) for lo in range(0, n, batch_size)]
    lengths = torch.as_tensor(lengths, dtype=torch.int64).reshape(-1)
    if lengths.numel() != n:
        raise ValueError(f"lengths has {lengths.numel()} entries for {n} examples")
    sorted_lengths, order = torch.sort(lengths, stable=True)
    sizes: list[int] = []
    count = 0
    for length in sorted_lengths.tolist():
        if count and ((count + 1) * length > batch_tokens or count == batch_size):
            sizes.append(count)
            count = 0
        count += 1
    sizes.append(count)
    return list(order.split(sizes))


def epoch_index_batches(
    permutation: Tensor, offsets: Tensor | None, batch_size: int, start: int = 0
) -> list[Tensor]:
    """The global batches of an epoch's plan from batch ``start`` on, as index tensors:
    ``permutation`` cut at ``offsets`` (token batches) or every ``batch_size`` examples."""
    if offsets is not None:
        bounds = [(int(offsets[b]), int(offsets[b + 1])) for b in range(start, len(offsets) - 1)]
    else:
        n = len(permutation)
        bounds = [(b, min(b + batch_size, n)) for b in range(start * batch_size, n, batch_size)]
    return [permutation[lo:hi] for lo, hi in bounds]


class SeededItems(torch.utils.data.Dataset):
    """Makes item loading reproducible anywhere: each item is produced under RNG seeds derived
    from (run seed, epoch, index), in a worker or in the main process (whose own RNG state is
    left untouched), so random per-item transforms give the same result with any number of
    workers and after a resume."""

    def __init__(self, dataset: Any, seed: int, epoch: int) -> None:
        self.dataset, self.seed, self.epoch = dataset, seed, epoch

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        s = ((self.seed * 1_000_003 + self.epoch + 7) * 2_147_483_647 + int(index)) % 2**63
        if torch.utils.data.get_worker_info() is not None:
            torch.manual_seed(s)
            random.seed(s)
            np.random.seed(s % 2**32)
            return self.dataset[index]
        py, npy = random.getstate(), np.random.get_state()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(s)
            random.seed(s)
            np.random.seed(s % 2**32)
            try:
                return self.dataset[index]
            finally:
                random.setstate(py)
                np.random.set_state(npy)


def load_batches(
    task: Any,
    dataset: Any,
    index_batches: Sequence[Tensor],
    *,
    seed: int,
    epoch: int,
    num_workers: int,
    pin_memory: bool,
) -> Iterator[dict[str, Tensor]]:
    """The batches of ``index_batches`` (CPU tensors): the task's fast path
    (``task.get_batch``) when the dataset has one, else a DataLoader over the items
    (:class:`SeededItems`, ``task.collate``)."""
    if not index_batches:
        return
    first = task.get_batch(dataset, index_batches[0])
    if first is not None:
        yield first
        for idx in index_batches[1:]:
            batch = task.get_batch(dataset, idx)
            assert batch is not None
            yield batch
        return
    loader = torch.utils.data.DataLoader(
        SeededItems(dataset, seed, epoch),
        batch_sampler=[idx.tolist() for idx in index_batches],
        collate_fn=task.collate,
        num_workers=num_workers,
        pin_memory=pin_memory,
    )
    yield from loader
