"""Refit: once the validation split has chosen the run, train it again on train + validation.

A validation split holds back part of the training data to choose (the best epoch, when to
stop early). Once that choice is made the held-back examples need not stay unused: as
scikit-learn's ``refit`` and common practice in papers do, the chosen configuration is trained
once more, from the same initial weights, on the whole training split (fit + val), and that
model's test score is the one reported. With ``TrainConfig(refit=True)`` the
:class:`~tfam.training.Trainer` runs in two phases:

1. **Selection**: the run as without refit: per-epoch validation, early stopping (``patience``),
   ``max_minutes`` and ``max_steps``. The test split is not touched.
2. **Refit**: the weights go back to the state they had before the first step (the initial
   weights, ``init`` included), with a fresh optimiser, learning-rate schedule and gradient
   scaler, and every random stream seeded as at the start of a run. It trains on
   :func:`join_splits` (fit, val) for as many passes over the data as the selection run made
   (:func:`refit_steps`), on the schedule planned for ``epochs`` epochs of the larger set, so
   the learning rate follows the same curve per epoch as it did in the selection run. No
   per-epoch evaluation (no held-out data is left); the test split is evaluated once, at the
   end, on the refit model, which is the model saved.

This module holds the refit: the joined dataset, the plan of the refit (what the selection run
reached, how long the refit trains), which the checkpoint carries so that a kill during the
refit resumes in the refit, exactly, and the trainer's refit phase (:class:`RefitMixin`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

import tfam.training.sharding as sharding
from tfam.training.control import Stop

__all__ = [
    "PER_EXAMPLE",
    "JoinedSplits",
    "RefitMixin",
    "RefitPlan",
    "join_splits",
    "refit_steps",
]

# Attributes holding one entry per example: the joined dataset holds both parts' entries, in
# order. Every other attribute (normalisation, classes, tokenizer, pad id, name, ...) is a fact
# of the data shared by both splits and is read from the first part.
PER_EXAMPLE = ("lengths", "labels", "images", "src", "tgt", "pairs", "refs")

# Facts that must agree between the two parts for them to be trained on as one set.
_SHARED_FACTS = ("mean", "std", "pixel_scale", "classes", "pad_token_id", "vocab_size")


class JoinedSplits:
    """The examples of ``first`` followed by those of ``second``: index ``i`` is ``first[i]``
    for ``i < len(first)``, else ``second[i - len(first)]``.

    Attributes: :data:`PER_EXAMPLE` names are both parts' values joined (tensors and arrays
    concatenated along the first dimension, lists added), when both parts have them; any other
    attribute is the first part's (``black``, ``tokenizer``, ``pad_token_id``, ``mean``, ...).
    ``split`` is ``"<first>+<second>"``. Build it with :func:`join_splits`, which adds the
    ``get_batch`` fast path when both parts have it.
    """

    def __init__(self, first: Any, second: Any) -> None:
        for name in _SHARED_FACTS:
            if hasattr(first, name) and hasattr(second, name):
                a, b = getattr(first, name), getattr(second, name)
                if not _same(a, b):
                    raise ValueError(
                        f"refit: the splits to join differ in {name} ({_short(a)} and "
                        f"{_short(b)}): they cannot be trained on as one set"
                    )
        self.parts = (first, second)
        self.offset = len(first)
        self.split = (
            f"{getattr(first, 'split', None) or 'fit'}+{getattr(second, 'split', None) or 'val'}"
        )

    def __len__(self) -> int:
        return self.offset + len(self.parts[1])

    def __getitem__(self, i: int) -> Any:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for {n} examples")
        i %= n
        return self.parts[0][i] if i < self.offset else self.parts[1][i - self.offset]

    def __getattr__(self, name: str) -> Any:
        # Only called for names not found the usual way. "parts" itself is guarded, so that a
        # half-built instance (unpickling, copying) raises AttributeError, not a recursion.
        if name.startswith("__") or name in ("parts", "offset"):
            raise AttributeError(name)
        first, second = self.__dict__["parts"]
        value = getattr(first, name)
        if name in PER_EXAMPLE and hasattr(second, name):
            return _concat(value, getattr(second, name), name)
        return value

    def __repr__(self) -> str:
        a, b = self.parts
        return f"JoinedSplits({len(a)} + {len(b)} = {len(self)} examples, split={self.split!r})"


class _JoinedBatches(JoinedSplits):
    """:class:`JoinedSplits` of two parts that both have ``get_batch(indices)``."""

    def get_batch(self, indices: Tensor | Any) -> Any:
        """What the parts' ``get_batch`` returns (a tensor, or tuples, lists and dicts of
        tensors), for ``indices`` (B,) into the joined set, rows in the order asked.

        A batch from one part is that part's answer unchanged; a batch from both gathers each
        part's rows and interleaves them back into the order asked (tensors whose shapes differ
        beyond the first dimension, such as sequences padded per batch, cannot be joined and
        are a clear error)."""
        idx = torch.as_tensor(indices, dtype=torch.int64).reshape(-1)
        first, second = self.parts
        mine = idx < self.offset
        if bool(mine.all()):
            return first.get_batch(idx)
        if not bool(mine.any()):
            return second.get_batch(idx - self.offset)
        where_a, where_b = mine.nonzero().squeeze(1), (~mine).nonzero().squeeze(1)
        a = first.get_batch(idx[where_a])
        b = second.get_batch(idx[where_b] - self.offset)
        # Row j of cat(a, b) belongs at position order[j] of the batch.
        order = torch.cat([where_a, where_b])
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.numel())
        if _item_list(a, where_a.numel()) and _item_list(b, where_b.numel()):
            # A list with one entry a row is the items the task collates (pixel sequences,
            # utterances): put the items themselves in the order asked.
            items = [*a, *b]
            return [items[j] for j in inverse.tolist()]
        return _merge(a, b, inverse, "get_batch()")


def join_splits(first: Any, second: Any) -> JoinedSplits:
    """``first`` then ``second`` as one dataset (:class:`JoinedSplits`); it has the
    ``get_batch`` fast path exactly when both parts have it."""
    if len(first) == 0 or len(second) == 0:
        empty = "first" if len(first) == 0 else "second"
        raise ValueError(f"refit: the {empty} split to join is empty")
    both = hasattr(first, "get_batch") and hasattr(second, "get_batch")
    return (_JoinedBatches if both else JoinedSplits)(first, second)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Tensor | np.ndarray) or isinstance(b, Tensor | np.ndarray):
        ta, tb = torch.as_tensor(a), torch.as_tensor(b)
        return ta.shape == tb.shape and bool(torch.equal(ta, tb.to(ta.dtype)))
    return a == b


def _short(v: Any) -> str:
    if isinstance(v, Tensor | np.ndarray):
        return str(torch.as_tensor(v).tolist())
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _concat(a: Any, b: Any, name: str) -> Any:
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        return torch.cat([a, b])
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return np.concatenate([a, b])
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return [*a, *b] if isinstance(a, list) else (*a, *b)
    if a is None and b is None:
        return None
    raise TypeError(
        f"refit: cannot join attribute {name!r} of the two splits ({type(a).__name__} and "
        f"{type(b).__name__})"
    )


def _item_list(got: Any, rows: int) -> bool:
    """Whether a part's ``get_batch`` answer is a list of ``rows`` items (what
    ``Task.collate`` reads), not columns: a list (columns come as a tuple, a dict or a
    tensor) with one entry a row, none of them a tensor of ``rows`` rows (a column)."""
    if not isinstance(got, list) or len(got) != rows:
        return False
    return not any(isinstance(x, Tensor) and x.ndim > 0 and x.shape[0] == rows for x in got)


def _merge(a: Any, b: Any, inverse: Tensor, where: str) -> Any:
    """cat(a, b) along the first dimension, rows put back in batch order (``inverse``)."""
    if isinstance(a, np.ndarray):
        a = torch.from_numpy(a)
    if isinstance(b, np.ndarray):
        b = torch.from_numpy(b)
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        if a.shape[1:] != b.shape[1:] or a.dtype != b.dtype:
            raise ValueError(
                f"refit: the two splits' {where} give {a.dtype} {tuple(a.shape)} and {b.dtype} "
                f"{tuple(b.shape)}, which cannot be joined into one batch (a dataset whose "
                "batches are padded to their longest example needs the item path: no get_batch)"
            )
        return torch.cat([a, b]).index_select(0, inverse.to(a.device))
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return {k: _merge(a[k], b[k], inverse, f"{where}[{k!r}]") for k in a}
    if isinstance(a, list | tuple) and isinstance(b, list | tuple) and len(a) == len(b):
        merged = [_merge(x, y, inverse, f"{where}[{i}]") for i, (x, y) in enumerate(zip(a, b))]
        return merged if isinstance(a, list) else tuple(merged)
    raise ValueError(
        f"refit: the two splits' {where} give {type(a).__name__} and {type(b).__name__}, "
        "which cannot be joined into one batch"
    )


def refit_steps(
    epochs_done: int, steps_into_epoch: int, selection_steps_per_epoch: int, steps_per_epoch: int
) -> int:
    """Optimiser steps of a refit that makes as many passes over its data as the selection
    run made over its own: ``epochs_done`` whole epochs and ``steps_into_epoch`` steps of the
    next (a run cut by max_steps or max_minutes), at least one step."""
    partial = round(steps_into_epoch * steps_per_epoch / selection_steps_per_epoch)
    return max(1, epochs_done * steps_per_epoch + partial)


@dataclass
class RefitPlan:
    """What the selection run reached and how long the refit trains; plain values, kept in
    the checkpoint (``state["refit"]``).

    selection_epochs / selection_steps_into_epoch: the selection run's completed epochs and the
    steps it took into the next. selection_steps: optimiser steps of the whole run when the
    refit began (its rows' ``step`` continues from there). selection_stopped: the selection run
    ended before ``epochs`` (patience, max_steps or max_minutes). selection_val: its final
    validation metrics. examples: size of fit + val. steps_per_epoch / steps: the refit's.
    """

    selection_epochs: int
    selection_steps_into_epoch: int
    selection_steps: int
    selection_stopped: bool
    examples: int
    steps_per_epoch: int
    steps: int
    selection_val: dict[str, float] = field(default_factory=dict)

    @property
    def epochs(self) -> float:
        """The refit's length in epochs (passes over fit + val)."""
        return self.steps / self.steps_per_epoch

    @property
    def epochs_text(self) -> str:
        e = self.epochs
        return str(round(e)) if math.isclose(e, round(e)) else f"{e:.2f}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["selection_val"] = {k: float(v) for k, v in self.selection_val.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RefitPlan:
        return cls(
            selection_epochs=int(d["selection_epochs"]),
            selection_steps_into_epoch=int(d["selection_steps_into_epoch"]),
            selection_steps=int(d["selection_steps"]),
            selection_stopped=bool(d["selection_stopped"]),
            examples=int(d["examples"]),
            steps_per_epoch=int(d["steps_per_epoch"]),
            steps=int(d["steps"]),
            selection_val={k: float(v) for k, v in dict(d.get("selection_val", {})).items()},
        )


class RefitMixin:
    """The :class:`~tfam.training.Trainer`'s refit phase: the steps it has left, when a resumed
    run is finished, beginning the refit after the selection run and resuming one. Reads and
    sets the trainer's ``phase``, ``refit_plan``, position and ``_initial_weights``."""

    def _refit_left(self) -> int:
        """Optimiser steps the refit has still to take (0 before it is planned)."""
        plan = self.refit_plan
        return 0 if plan is None else plan.steps - (self.global_step - plan.selection_steps)

    def _epoch_stop(self) -> int:
        """The step of the current epoch at which its training stops: the epoch's end, or the
        refit's last step when that comes first."""
        if self.phase == 2:
            return min(self.steps_per_epoch, self.batch_in_epoch + self._refit_left())
        return self.steps_per_epoch

    def _run_finished(self) -> bool:
        """Whether a resumed run has nothing left to do."""
        cfg = self.config
        if cfg.refit:
            return self.phase == 2 and self._refit_left() <= 0
        return self.stopped_early or (self.epoch >= cfg.epochs and self.batch_in_epoch == 0)

    def _refit(self) -> None:
        """The refit phase, begun after the selection run or resumed, trained to its end."""
        if self.phase == 1:
            self._begin_refit()
        while self._refit_left() > 0:
            self._train_epoch()
            if self.batch_in_epoch == self.steps_per_epoch:
                self._end_epoch()
        every = self.config.save_every
        if self.batch_in_epoch and not (every and self.global_step % every == 0):
            self.save()  # it ended mid-epoch: the checkpoint that says the run is finished

    def _begin_refit(self) -> None:
        """End the selection run and set up the refit: train on fit + val, from the initial
        weights, with a fresh optimiser and schedule and every random stream seeded as at the
        start of a run. Ends with a checkpoint: a kill from here on resumes in the refit."""
        cfg = self.config
        assert self.val_set is not None and self._initial_weights is not None
        if self.batch_in_epoch == 0 and self.history:
            selection_val = self._final_row_metrics()
        else:  # the selection run was cut mid-epoch: score the weights it ended with
            result = self.evaluate_metrics()
            if result is None:
                raise Stop  # Ctrl-C while evaluating: the resumed run evaluates again
            selection_val = result
        joined = join_splits(self.selection_set, self.val_set)
        selection_steps_per_epoch = self.steps_per_epoch
        self._plan(joined)
        self.refit_plan = plan = RefitPlan(
            selection_epochs=self.epoch,
            selection_steps_into_epoch=self.batch_in_epoch,
            selection_steps=self.global_step,
            selection_stopped=self.stopped_early or self.epoch < cfg.epochs,
            examples=len(joined),
            steps_per_epoch=self.steps_per_epoch,
            steps=refit_steps(
                self.epoch, self.batch_in_epoch, selection_steps_per_epoch, self.steps_per_epoch
            ),
            selection_val=dict(selection_val),
        )
        sharding.load_full_model_weights(self.model, self._initial_weights, self._sharded)
        self._initial_weights = None
        if self.ema is not None:
            self.ema.reset(self.model)
        self.phase = 2
        self.epoch = self.batch_in_epoch = 0
        self.permutation = self.batch_offsets = None
        self.sums = self._zero_sums()
        self._seed_streams()
        unit = "images" if self.task.unit == "images" else "examples"
        best = self._best_row()
        chosen = ""
        if best is not None:
            chosen = (
                f" (the selection run's best val {self.task.primary_metric} "
                f"{self._fmt_metric(self._score(best))} was at epoch {best['epoch']})"
            )
        self._say(
            f"refit: training a fresh model on fit + val ({plan.examples} {unit}) for "
            f"{plan.epochs_text} epochs ({plan.steps} steps), from the initial weights{chosen}"
        )
        self.save()

    def _resume_refit(self, plan: RefitPlan, saved_epochs: int, source: str) -> None:
        """Set up the refit a checkpoint is in (before its optimiser state is loaded)."""
        if saved_epochs != self.config.epochs:
            raise ValueError(
                f"cannot resume from {source} with epochs={self.config.epochs}: it is in its "
                f"refit, whose length the selection run (epochs={saved_epochs}) has set; resume "
                f"with epochs={saved_epochs}, or start a new run"
            )
        assert self.val_set is not None
        joined = join_splits(self.selection_set, self.val_set)
        if len(joined) != plan.examples:
            raise ValueError(
                f"cannot resume from {source}: its refit trains on {plan.examples} examples of "
                f"fit + val, the splits given have {len(joined)}"
            )
        self._plan(joined)
        self.phase, self.refit_plan, self._initial_weights = 2, plan, None
