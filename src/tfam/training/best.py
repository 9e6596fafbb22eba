"""The saved model is the best validation epoch's (as Keras' ``restore_best_weights`` and
Hugging Face's ``load_best_model_at_end``): the trainer keeps the weights of the epoch with the
best validation score and, at the end, puts them back into the model before the test split is
evaluated and the model is saved. The last epoch's weights stay in the checkpoint, for resuming
and extending the run.

Where the best weights are kept. With an ``out_dir``, on disk, not in memory (a large model
would need a second copy): ``checkpoints/best-step<S>.pt`` (the checkpoint file format of
:mod:`tfam.training.checkpoint`, written atomically and verified when read), named by the
optimiser step ``S`` that ended the epoch. The training checkpoint records which file it refers
to (``state["best"]``), so a kill at any instant resumes with the best state that belongs to
that checkpoint: a best file written after the last checkpoint (killed before its rename) is a
stray that the next save removes, and the files referred to by ``last.pt`` and ``prev.pt`` are
never removed. Without an ``out_dir``, a CPU copy in memory.

When. Only with a validation split and without refit: without a validation split the last
epoch is saved (the per-epoch scores are the test split's, which must not choose the model); a
refit saves the refit model (:mod:`tfam.training.refit`). A run stopped mid-epoch
(``max_steps``, ``max_minutes``) scores its last weights on the validation split; they are saved
when they beat the best epoch.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from torch import Tensor

import tfam.training.distributed as D
import tfam.training.sharding as sharding
from tfam.fileio import atomic_write_bytes
from tfam.training.checkpoint import encode_checkpoint, read_checkpoint
from tfam.training.errors import CheckpointSaveError

__all__ = ["BEST_PREFIX", "BestMixin", "SavedModel"]

BEST_PREFIX = "best-step"


class SavedModel(dict):
    """What the saved model is: ``epoch`` (its end-of-epoch weights; for weights taken
    mid-epoch, the epochs completed), ``step`` (optimiser steps), ``rule`` ("best val",
    "last epoch" without a validation split, "last step" for weights taken mid-epoch, "refit")
    and ``val`` (its validation metrics, {} without them). A plain dict, for results.json."""


class BestMixin:
    """The :class:`~tfam.training.Trainer`'s best-epoch keeping. Reads its ``history``,
    ``config``, ``val_set``, position and checkpoint directory; sets ``_best_ref`` (which epoch
    is kept, and where), which the checkpoint carries."""

    _best_ref: dict[str, Any] | None = None  # {"epoch", "step", "file"}
    _best_memory: dict[str, Tensor] | None = None  # without out_dir
    _best_kept: tuple[str, ...] = ()  # best files referred to by the checkpoint(s) on disk

    @property
    def keeps_best(self) -> bool:
        """Whether the saved model is chosen on the validation split (see the module doc)."""
        return self.val_set is not None and not self.config.refit

    def _remember_best(self, row: dict[str, Any]) -> None:
        """At the end of a selection epoch whose ``row`` was just added to the history, before
        its checkpoint: keep these weights when the epoch is the best so far. Every process
        calls it (FSDP gathers the weights)."""
        if not self.keeps_best or self.phase != 1 or self._best_row() is not row:
            return
        epoch, step = int(row["epoch"]), self.global_step
        if self.checkpoint_dir is None:
            self._best_memory = sharding.full_model_weights(self.model, self._sharded)
            self._best_ref = {"epoch": epoch, "step": step, "file": None}
            return
        name = f"{BEST_PREFIX}{step}.pt"
        error = None
        if self._sharded:
            weights = sharding.full_model_weights(self.model, True)
        elif self.dist.is_main:
            # The live tensors: serialised once, no second copy held.
            weights = {k: v.detach() for k, v in self.model.state_dict().items()}
        if self.dist.is_main:
            data = encode_checkpoint({"model": weights, "epoch": epoch, "step": step}, step=step)
            try:
                atomic_write_bytes(self.checkpoint_dir / name, data)
            except OSError as err:
                error = (
                    f"could not write the best epoch's weights into {self.checkpoint_dir / name}"
                    f": {err.strerror or err}; free space and resume"
                )
            del data
        D.barrier(self.dist)
        if error is not None:
            raise CheckpointSaveError(error)
        self._best_ref = {"epoch": epoch, "step": step, "file": name}

    def _best_state(self) -> dict[str, Any] | None:
        """What the checkpoint holds about the best epoch (plain values)."""
        return dict(self._best_ref) if self._best_ref is not None else None

    def _load_best_state(self, state: dict[str, Any]) -> None:
        ref = state.get("best")
        self._best_ref = dict(ref) if ref else None
        self._best_kept = (ref["file"],) if ref and ref.get("file") else ()

    def _drop_stale_best(self) -> None:
        """After a checkpoint is written (rank 0): remove best files that neither it nor the
        previous one refers to (a newer best replaced them, or a kill left them behind)."""
        ref = self._best_ref
        now = (ref["file"],) if ref and ref.get("file") else ()
        keep = set(now) | set(self._best_kept)
        self._best_kept = now
        if self.checkpoint_dir is None:
            return
        for path in self.checkpoint_dir.glob(f"{BEST_PREFIX}*.pt"):
            if path.name not in keep:
                path.unlink(missing_ok=True)

    def _best_weights(self) -> dict[str, Tensor]:
        ref = self._best_ref
        assert ref is not None
        if ref.get("file") is None:
            assert self._best_memory is not None
            return self._best_memory
        path = Path(self.checkpoint_dir) / ref["file"]
        return read_checkpoint(path)["model"]

    def _choose_saved(self, last: dict[str, float]) -> SavedModel:
        """At the end of the run, before the test split is evaluated: put the weights to save
        into the model and say which they are. ``last``: the validation metrics of the weights
        the run ended with (its last epoch's, or the last step's when it stopped mid-epoch).
        Every process calls it."""
        if self.refit_plan is not None:
            return SavedModel(epoch=self.epoch, step=self.global_step, rule="refit", val={})
        mid_epoch = self.batch_in_epoch != 0 or not self.history
        if not self.keeps_best:
            rule = "last step" if mid_epoch else "last epoch"
            return SavedModel(epoch=self.epoch, step=self.global_step, rule=rule, val={})
        best = self._best_row()
        ending = SavedModel(epoch=self.epoch, step=self.global_step, rule="last step", val=last)
        if best is None:
            return ending
        score = self._score(best)
        if mid_epoch:
            sign = 1.0 if self.task.higher_is_better else -1.0
            now = float(last.get(self.task.primary_metric, math.nan))
            if not math.isnan(now) and sign * now > sign * score:
                return ending  # the last step's weights beat every epoch
        chosen = SavedModel(
            epoch=int(best["epoch"]),
            step=int(best["step"]),
            rule="best val",
            val={k: best.get(f"val_{k}", math.nan) for k in self.task.metrics},
        )
        if not mid_epoch and best is self.history[-1]:
            return chosen  # the weights in the model are the best epoch's
        ref = self._best_ref
        if ref is None or int(ref["epoch"]) != int(best["epoch"]):
            # A run resumed from a checkpoint written before best-epoch saving existed.
            self._say(
                f"note: the weights of the best epoch ({best['epoch']}) were not kept by the "
                "checkpoint this run resumed from; the last weights are saved",
                always=True,
            )
            return ending
        sharding.load_full_model_weights(self.model, self._best_weights(), self._sharded)
        self._best_memory = None
        return chosen
