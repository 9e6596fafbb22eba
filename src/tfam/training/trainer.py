"""The trainer: AdamW + warmup/cosine, clipping, accumulation, any device and precision,
torchrun/DDP, per-epoch validation, early stopping, and exact kill/resume. What a batch means
(loss, metrics, prediction) is the task's business (:mod:`tfam.training.tasks`); the trainer
knows no family and no data kind.

    torch.manual_seed(0)
    model = tfam.create_model("vit_digits")
    fit, val = load_dataset("digits", "fit"), load_dataset("digits", "val")
    test = load_dataset("digits", "test")
    config = TrainConfig(epochs=100, batch_size=128, lr=2e-3, patience=10)
    result = Trainer(model, fit, test, config, out_dir="runs/digits", val_set=val,
                     augment=default_augment("digits")).fit()
    print(result.final_test_acc, result.best_val_acc)

Splits. With ``val_set`` the model is evaluated on it after every epoch; "best" and early
stopping (``patience``) use it. At the end the best epoch's weights go back into the model,
which the test split scores once and which is saved (:mod:`tfam.training.best`). Without
``val_set`` the per-epoch evaluation runs on ``test_set`` (as before validation splits
existed); the "best" it reports is then chosen on the test split and is optimistic.

Refit. With ``refit=True`` (and a ``val_set``) the run above chooses; then a fresh model trains
on fit + val, and the test split scores it (:mod:`tfam.training.refit`).

Exact. Every random draw of a run comes from state that the checkpoint holds, taken between two
optimiser steps (:mod:`tfam.training.run_state`); items loaded through a DataLoader are produced
under a seed derived from (seed, epoch, index) (:mod:`tfam.training.batching`). So a run killed
at any instant and resumed with ``fit(resume=True)`` performs the same arithmetic in the same
order as one that was never stopped, and ends with bit-for-bit identical weights (same machine,
torch build, thread count and number of processes).

Batches and accumulation. ``batch_size`` is the number of examples per optimiser step, over all
processes. With ``accum_steps = K`` each process cuts its share into K micro-batches whose
gradients add up before the step. Each micro-batch's summed loss is divided by the number of
counted units (images, real tokens) of the whole global batch, so K and the number of
processes change memory and speed, not the result (up to floating-point rounding). One epoch is
ceil(N / batch_size) steps; the last batch of an epoch may be smaller. With ``batch_tokens``
a batch instead holds as many examples as fit that many padded tokens, grouped by length
(:mod:`tfam.training.batching`); the epoch's plan (order and batch boundaries) is drawn with the
data generator and checkpointed, and every epoch has the same number of steps.

Schedules: warmup, then ``"cosine"`` (default) to ``min_lr`` or ``"inverse_sqrt"``
(:mod:`tfam.training.optim`). ``fit(resume=True)`` with a larger ``epochs`` extends a run
(:mod:`tfam.training.run_state`).

Files written into ``out_dir``: see :mod:`tfam.training.reporting`.

The trainer is this loop plus one module per concern, each a mixin of :class:`Trainer`: the
run's state and resume (:mod:`~tfam.training.run_state`), reporting (logs, metrics rows, the
result; :mod:`~tfam.training.reporting`), control (Ctrl-C, step and time limits, divergence;
:mod:`~tfam.training.control`), the refit phase (:mod:`~tfam.training.refit`) and the
distributed weight handling (DDP/FSDP; :mod:`~tfam.training.sharding`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

import tfam.training.distributed as D  # not via the package face, which imports us
import tfam.training.sharding as sharding
from tfam.training.batching import (
    epoch_index_batches,
    eval_index_batches,
    load_batches,
    token_batches,
)
from tfam.training.best import BestMixin
from tfam.training.budget import now
from tfam.training.config import TrainConfig
from tfam.training.control import KILL_ENV, KILL_RANK_ENV, ControlMixin, Stop, kill_step
from tfam.training.devices import (
    autocast,
    check_compile_available,
    move_batch,
    place_extra_models,
    resolve_device,
)
from tfam.training.ema import WeightEMA
from tfam.training.init_weights import load_init_weights
from tfam.training.metrics import MetricsLogger
from tfam.training.refit import RefitMixin, RefitPlan
from tfam.training.reporting import ReportingMixin
from tfam.training.results import TrainResult
from tfam.training.run_state import RunStateMixin
from tfam.training.runlock import RunLock
from tfam.training.tasks import Augment, Batch, ImageClassification, Task, split_batch

__all__ = ["KILL_ENV", "KILL_RANK_ENV", "Trainer", "train"]


class Trainer(RunStateMixin, ReportingMixin, ControlMixin, RefitMixin, BestMixin):
    """Trains ``model`` on ``train_set`` for ``task`` (default: :class:`ImageClassification`,
    ``model(x (B, C, H, W)) -> logits (B, num_classes)``).

    Datasets: what the task reads. For images, items ``(image (C, H, W) float, label int)``,
    with a ``get_batch(indices) -> (images, labels)`` fast path used when present (one gather
    per batch); otherwise items go through a ``torch.utils.data.DataLoader`` (``num_workers``
    worker processes, pinned memory on CUDA). test_set / val_set may be None.
    augment: optional ``(images, generator) -> images`` applied to training batches; when it
    also takes ``fill`` and the dataset has ``black`` (tfam's BatchAugment and ImageDataset),
    padding is filled with the dataset's normalised black.
    out_dir: where checkpoints, metrics and the final model go; None keeps everything in memory.
    run_args: extra facts for train_args.json (the CLI puts its arguments there).
    resume_hint: the command that resumes this run, printed after Ctrl-C.
    callbacks: objects with ``on_epoch_end(trainer, row)`` / ``on_finish(trainer, result)``,
    called on rank 0 (see :mod:`tfam.training.callbacks`).
    """

    def __init__(
        self,
        model: nn.Module,
        train_set: Any,
        test_set: Any = None,
        config: TrainConfig | None = None,
        out_dir: str | os.PathLike | None = None,
        augment: Augment | None = None,
        run_args: dict[str, Any] | None = None,
        resume_hint: str | None = None,
        *,
        val_set: Any = None,
        task: Task | None = None,
        callbacks: Sequence[Any] = (),
    ) -> None:
        self.config = config = config or TrainConfig()
        if len(train_set) == 0:
            raise ValueError("train_set is empty: nothing to train on")
        config.check_splits(has_val=val_set is not None)
        self.task: Task = task if task is not None else ImageClassification()
        self.model = model
        self.train_set = train_set
        self.selection_set = train_set  # what the selection run trains on (train_set, then)
        self.test_set = test_set
        self.val_set = val_set
        self.augment = augment
        self.callbacks = list(callbacks)
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.run_args = dict(run_args or {})
        self.resume_hint = resume_hint

        env = D.dist_info()
        self.device = resolve_device(config.device, env.local_rank if env.enabled else None)
        self.dist = D.init_distributed(self.device, config.dist_timeout)
        if config.batch_size < self.dist.world_size:
            raise ValueError(
                f"batch_size={config.batch_size} is invalid with {self.dist.world_size} "
                "processes: expected at least one example per process"
            )
        # FSDP shards the weights: reading or writing them whole is a collective.
        self._sharded = config.fsdp and self.dist.enabled
        self._init_lines = (
            load_init_weights(model, config.init, data=self.run_args.get("data"))
            if config.init
            else []
        )
        model.to(self.device)
        if config.ema is not None and self._sharded:
            raise ValueError(
                f"ema={config.ema} is invalid with fsdp=True: each process holds a shard of the "
                "weights, and the average needs them whole; use DDP (fsdp=False) or ema=None"
            )
        # The average of the weights (tfam.training.ema): evaluated and saved in their place.
        self.ema = WeightEMA(model, config.ema) if config.ema is not None else None
        self._ema_in_model = False  # True once the run's end has put the average in the model
        self.train_model: nn.Module = D.wrap_model(model, self.dist, self.device, config.fsdp)
        if config.compile:
            check_compile_available(self.device)
            self.train_model = torch.compile(self.train_model)
        # The task's extra models (a teacher): placed, frozen; not wrapped, not checkpointed.
        self.extra_models = place_extra_models(self.task, model, self.device)
        # The weights before any step: a refit starts again from them.
        self._initial_weights = (
            sharding.full_model_weights(model, self._sharded) if config.refit else None
        )
        self._plan(train_set)
        self.show_progress = self.dist.is_main and (
            config.progress
            if config.progress is not None
            else (not config.quiet and sys.stderr.isatty())
        )
        self.num_workers = (
            config.num_workers
            if config.num_workers is not None
            else min(4, max(1, (os.cpu_count() or 1) - 1))
        )
        # Position in the run. A checkpoint holds all of it (tfam.training.run_state).
        self.epoch = 0  # completed epochs
        self.batch_in_epoch = 0  # optimiser steps done in the current epoch
        self.global_step = 0
        self.permutation: Tensor | None = None  # data order of the current epoch
        self.batch_offsets: Tensor | None = None  # its batch boundaries (token batches only)
        self.sums = self._zero_sums()
        self.history: list[dict[str, Any]] = []
        self.stopped_early = False
        self.phase = 1  # 1: training (the selection run, with refit); 2: the refit
        self.refit_plan: RefitPlan | None = None  # set when the refit begins
        self._elapsed_base = 0.0
        self._t0 = now()
        self._stop_requested = False
        self._logger: MetricsLogger | None = None
        self._kill_at: int | None = None
        self._lock: RunLock | None = None

    # -- data ---------------------------------------------------------------------------------
    def _batches(
        self, dataset: Any, index_batches: Sequence[Tensor], epoch: int
    ) -> Iterator[Batch]:
        return load_batches(
            self.task,
            dataset,
            index_batches,
            seed=self.config.seed,
            epoch=epoch,
            num_workers=self.num_workers,
            pin_memory=self.device.type == "cuda",
        )

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        return autocast(self.device, self.config.precision)

    # -- one optimiser step -------------------------------------------------------------------
    def step(self, batch: Batch) -> dict[str, float]:
        """One optimiser step on this process's share of a global batch, in ``accum_steps``
        micro-batches. Returns the task's metric sums over the share (plain loss sum, ...)."""
        cfg = self.config
        model = self.train_model
        model.train()
        self.optimizer.zero_grad(set_to_none=True)
        # The loss is averaged over the counted units of the whole global batch.
        count = self.task.count(batch).to(torch.float64)
        total = float(D.all_reduce_tensor(count.to(self._reduce_device), self.dist))
        denominator = total / self.dist.world_size  # DDP and FSDP average over ranks
        parts = split_batch(batch, cfg.accum_steps) or [batch]
        sums: dict[str, Tensor] = {}
        for i, part in enumerate(parts):
            part = move_batch(part, self.device)
            last = i == len(parts) - 1
            no_sync = getattr(model, "no_sync", None)
            sync = contextlib.nullcontext() if last or no_sync is None else no_sync()
            with sync:
                with self._autocast():
                    loss, part_sums = self.task.train_loss(model, part, cfg)
                scaled = loss / denominator if denominator > 0 else loss * 0.0
                if self.scaler is not None:
                    self.scaler.scale(scaled).backward()
                else:
                    scaled.backward()
            for k, v in part_sums.items():
                sums[k] = sums[k] + v if k in sums else v
        values = {k: float(v) for k, v in zip(sums, torch.stack(list(sums.values())).tolist())}
        self._check_finite(values.get("loss", 0.0))
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if cfg.clip_grad:
            norm = nn.utils.clip_grad_norm_(self.model.parameters(), cfg.clip_grad)
            if self.scaler is None and not math.isfinite(float(norm)):
                self._diverged("the gradient norm", float(norm))
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.scheduler.step()
        if self.ema is not None:
            self.ema.update(self.model)
        return values

    def train_step(self, x: Tensor, y: Tensor) -> tuple[float, int]:
        """One optimiser step on images x (B, C, H, W), labels y (B,) (image classification).
        Returns (summed plain cross-entropy, number correct) over the batch."""
        sums = self.step({"images": x, "labels": y.to(torch.int64)})
        return sums["loss"], int(sums["correct"])

    # -- evaluation ---------------------------------------------------------------------------
    def _evaluated_weights(self) -> contextlib.AbstractContextManager[Any]:
        """While a run trains, evaluations (and the best epoch's copy) see the weight average
        when there is one (``ema``); once the run's end has put it into the model, the model
        as it is."""
        if self.ema is None or self._ema_in_model:
            return contextlib.nullcontext()
        return self.ema.swapped(self.model)

    def _use_average(self) -> None:
        """At the run's end: the average becomes the model (tested, saved)."""
        if self.ema is not None and not self._ema_in_model:
            self.ema.copy_to(self.model)
            self._ema_in_model = True

    @torch.inference_mode()
    def evaluate_metrics(
        self, dataset: Any = None, limit: int | None = None
    ) -> dict[str, float] | None:
        """The task's metrics on ``dataset`` (default: the per-epoch split), shared over the
        processes; with ``limit`` < its size, on ``limit`` evenly spread examples (a budget's
        final evaluation). None if there is no such split, or (single process) if a stop was
        requested while evaluating."""
        if dataset is None:
            dataset = self.val_set if self.val_set is not None else self.test_set
        if dataset is None:
            return None
        # FSDP gathers weights inside forward: every rank runs forward on the raw module
        # the same number of times; DDP's module can run alone.
        model = self.train_model if self._sharded else self.model
        was_training = model.training
        model.eval()
        cfg = self.config
        n = len(dataset)
        # A budget's final evaluation: ``limit`` evenly spread examples.
        subset = None if limit is None or limit >= n else torch.arange(limit) * n // limit
        chunks, keep = [], []
        # Text data is cut by padded tokens too (lengths sorted): memory follows tokens.
        lengths = getattr(dataset, "lengths", None)
        if subset is not None and lengths is not None:
            lengths = torch.as_tensor(lengths, dtype=torch.int64).reshape(-1)[subset]
        count = n if subset is None else len(subset)
        for index in eval_index_batches(count, cfg.eval_batch_size, lengths, cfg.eval_batch_tokens):
            if subset is not None:
                index = subset[index]
            local = D.shard(index, self.dist)
            keep.append(local.numel() > 0)
            chunks.append(local if local.numel() > 0 else torch.zeros(1, dtype=torch.int64))
        sums: dict[str, Tensor] = {}
        with self._evaluated_weights():
            try:
                for batch, use in zip(self._batches(dataset, chunks, epoch=-1), keep):
                    if self._stop_requested and not self.dist.enabled:
                        return None
                    batch = move_batch(batch, self.device)
                    with self._autocast():
                        part = self.task.eval_sums(model, batch)
                    for k, v in part.items():
                        v = v if use else v * 0
                        sums[k] = sums[k] + v if k in sums else v
            finally:
                model.train(was_training)
        values = {k: float(v) for k, v in sums.items()}
        values = D.all_reduce_sums(values, self.dist, self._reduce_device)
        return self.task.reduce(values)

    def evaluate(self, dataset: Any = None) -> tuple[float, float] | None:
        """(mean loss, accuracy) on ``dataset`` (default: the per-epoch split); see
        :meth:`evaluate_metrics` for every metric of the task."""
        result = self.evaluate_metrics(dataset)
        if result is None:
            return None
        return result.get("loss", math.nan), result.get("acc", math.nan)

    # -- the run ------------------------------------------------------------------------------
    def fit(self, resume: bool = False) -> TrainResult:
        """Train for ``config.epochs`` epochs (or up to ``max_steps``) and write the run files.

        resume: continue from ``out_dir/checkpoints`` (last.pt, or prev.pt if last.pt is bad);
        starts fresh if there is no checkpoint yet. Without it, an ``out_dir`` that already
        holds a checkpoint is refused rather than overwritten, and so is one that holds a saved
        model without checkpoints. A second run into the same ``out_dir`` while one is
        running is refused (a lock).

        Ctrl-C (SIGINT, in the main thread) stops at the end of the current step, writes a
        checkpoint, prints how to resume and raises KeyboardInterrupt. A second Ctrl-C aborts
        at once (the last checkpoint stays). A non-finite loss raises
        :class:`NonFiniteLossError` and keeps the last good checkpoint.
        """
        try:
            return self._fit(resume)
        finally:
            if self._lock is not None:
                self._lock.release()
                self._lock = None

    def _fit(self, resume: bool) -> TrainResult:
        cfg = self.config
        if self.out_dir is not None and self.dist.is_main:
            self._prepare_out_dir()
        if not self._start(resume):
            return self._finished_result()
        if self.out_dir is not None and self.dist.is_main:
            self._logger = MetricsLogger(
                self.out_dir, self.history, tensorboard=cfg.tensorboard, columns=self.columns
            )
            self._write_run_files(final=False)
        self._kill_at = kill_step(self.dist.rank)
        with self._autocast():
            self.task.prepare_training(
                self.train_set,
                lambda chunks: self._batches(self.train_set, chunks, epoch=self.epoch),
                lambda batch: move_batch(batch, self.device),
                self.show_progress,
            )
        stopped = False
        with self._sigint_handler():
            try:
                try:
                    while self.phase == 1 and self.epoch < cfg.epochs and not self.stopped_early:
                        self._train_epoch()
                        self._end_epoch()
                except Stop:
                    if self._stop_requested or not cfg.refit:
                        raise
                    self._say_limit()  # max_steps or max_minutes ended the selection run
                if cfg.refit:
                    self._refit()
            except Stop:
                stopped = True
            finally:
                if self._logger is not None:
                    self._logger.close()
        if stopped and self._stop_requested:
            self._interrupted()  # saves a checkpoint, raises KeyboardInterrupt
        if stopped:  # max_steps or max_minutes
            self.save()
            self._say_limit()
        self._use_average()  # with ema, the average is the model tested and saved
        return self._finish(stopped_early=stopped or self.stopped_early)

    def _epoch_batches(self) -> Iterator[Batch]:
        """The rest of the epoch's batches (this process's share of each), from its plan."""
        assert self.permutation is not None
        plan = epoch_index_batches(
            self.permutation, self.batch_offsets, self.config.batch_size, self.batch_in_epoch
        )
        plan = plan[: self.steps_per_epoch - self.batch_in_epoch]
        indices = [D.shard(idx, self.dist) for idx in plan]
        return self._batches(self.train_set, indices, epoch=self.epoch)

    def _train_epoch(self) -> None:
        from tqdm import tqdm

        cfg = self.config
        n = len(self.train_set)
        if self.permutation is None:  # a new epoch: its data order, its running sums
            if self.lengths is not None and cfg.batch_tokens is not None:
                self.permutation, self.batch_offsets = token_batches(
                    self.lengths, cfg.batch_tokens, self.data_generator, self.dist.world_size
                )
            else:
                self.permutation = torch.randperm(n, generator=self.data_generator)
            self.batch_in_epoch = 0
            self.sums = self._zero_sums()
        desc = f"epoch {self.epoch + 1}/{cfg.epochs}"
        if self.phase == 2 and self.refit_plan is not None:
            desc = f"refit epoch {self.epoch + 1}/{self.refit_plan.epochs_text}"
        stop = self._epoch_stop()
        bar = tqdm(
            total=self.steps_per_epoch,
            initial=self.batch_in_epoch,
            desc=desc,
            disable=not self.show_progress,
            leave=False,
            dynamic_ncols=True,
        )
        batches = self._epoch_batches()
        try:
            while self.batch_in_epoch < stop:
                self._check_stop()
                t = time.perf_counter()
                batch = next(batches)
                batch = self.task.augment(
                    batch, self.augment, self.augment_generator, self.train_set
                )
                values = self.step(batch)
                self.batch_in_epoch += 1
                self.global_step += 1
                s = self.sums
                for k, v in values.items():
                    s[k] = s.get(k, 0.0) + v
                s["seen"] += self._units(batch)
                s["train_seconds"] += time.perf_counter() - t
                if self.show_progress:
                    bar.update(1)
                    bar.set_postfix(self._progress_postfix(s), refresh=False)
                if cfg.save_every and self.global_step % cfg.save_every == 0:
                    self.save()
                self._budget_step()  # max_minutes: time the first steps, then plan
                if self._kill_at is not None and self.global_step == self._kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
        finally:
            bar.close()
            if hasattr(batches, "close"):
                batches.close()

    def _end_epoch(self) -> None:
        cfg = self.config
        started = now()
        # The refit has no held-out data left to evaluate on.
        result = self.evaluate_metrics() if self.phase == 1 else None
        if self._stop_requested and not self.dist.enabled:
            raise Stop  # evaluation was cut short; the resumed run evaluates again
        own = {k: v for k, v in self.sums.items() if k != "train_seconds"}
        s = D.all_reduce_sums(own, self.dist, self._reduce_device)
        row = self._epoch_row(self.task.reduce(s), result, s["seen"])
        self.history.append(row)
        if self._logger is not None:
            self._logger.log_epoch(row)
        self.epoch += 1
        self.batch_in_epoch = 0
        self.permutation = None
        self.batch_offsets = None
        if (
            self.phase == 1
            and cfg.patience is not None
            and self._epochs_since_best() >= cfg.patience
        ):
            self.stopped_early = True
        with self._evaluated_weights():
            self._remember_best(row)  # before the checkpoint that refers to it
        replanned = self._budget_replan(now() - started)  # max_minutes: the plan goes with it
        self.save()
        if self.dist.is_main:
            for cb in self.callbacks:
                if hasattr(cb, "on_epoch_end"):
                    cb.on_epoch_end(self, row)
        self._say(self._epoch_line(row))
        if replanned:
            self._say(replanned)
        if self.stopped_early:
            self._say(
                f"early stop: no better {self.eval_split} {self.task.primary_metric} for "
                f"{cfg.patience} epochs (best at epoch {self._best_row()['epoch']})"
            )


def train(
    model: nn.Module,
    train_set: Any,
    test_set: Any = None,
    out_dir: str | os.PathLike | None = None,
    augment: Augment | None = None,
    resume: bool = False,
    *,
    val_set: Any = None,
    task: Task | None = None,
    callbacks: Sequence[Any] = (),
    **config: Any,
) -> TrainResult:
    """One call: ``train(model, train, test, out_dir="runs/x", epochs=50, lr=2e-3)``;
    keyword arguments are :class:`TrainConfig` fields."""
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(config) - names)
    if unknown:
        raise ValueError(
            f"{unknown[0]!r} is not a TrainConfig field; valid fields: {', '.join(sorted(names))}"
        )
    trainer = Trainer(
        model,
        train_set,
        test_set,
        TrainConfig(**config),
        out_dir,
        augment,
        val_set=val_set,
        task=task,
        callbacks=callbacks,
    )
    return trainer.fit(resume=resume)
