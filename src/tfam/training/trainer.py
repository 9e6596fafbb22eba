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
stopping (``patience``) use it, and the test split is evaluated once, at the end. Without
``val_set`` the per-epoch evaluation runs on ``test_set`` (as before validation splits
existed); the "best" it reports is then chosen on the test split and is optimistic.

Refit. With ``refit=True`` (and a ``val_set``) the run above is the *selection* run; then a
fresh model (the same initial weights, a fresh optimiser and schedule, the random streams
seeded anew) trains on fit + val for as many epochs as the selection run made, and the test
split is evaluated once, on it; it is the saved model (:mod:`tfam.training.refit`).

What "exact" means here. Every random draw of a run comes from state that the checkpoint
holds: the data order of an epoch is ``torch.randperm`` with the trainer's data generator, the
augmentation draws from the trainer's augmentation generator, dropout and drop-path from the
global torch RNG (and the CUDA RNG on a GPU); Python's and NumPy's RNGs are saved too, for every
rank. Items loaded through a DataLoader are produced under a seed derived from (seed, epoch,
index), so worker processes need no state. A checkpoint is taken between two optimiser steps
and stores the model, the optimiser, scheduler and gradient scaler, all those RNG states, the
epoch, the step within the epoch, the epoch's permutation (and token-batch boundaries) and
running sums. So a run killed at any instant and resumed with ``fit(resume=True)`` performs the same arithmetic in the same order
as one that was never stopped, and ends with bit-for-bit identical weights (same machine, torch
build, thread count and number of processes).

Batches and accumulation. ``batch_size`` is the number of examples per optimiser step, over all
processes. With ``accum_steps = K`` each process cuts its share into K micro-batches whose
gradients add up before the step. Each micro-batch's summed loss is divided by the number of
counted units (images, real tokens) of the whole global batch, so K and the number of
processes change memory and speed, not the result (up to floating-point rounding). One epoch is
ceil(N / batch_size) steps; the last batch of an epoch may be smaller. With ``batch_tokens``
a batch instead holds as many examples as fit that many padded tokens, grouped by length
(:mod:`tfam.training.batching`); the epoch's plan (order and batch boundaries) is drawn with the
data generator and checkpointed, and every epoch has the same number of steps.

Schedules. ``schedule="cosine"`` (default) warms up linearly, then decays along half a cosine
to ``min_lr``; ``"inverse_sqrt"`` is the Transformer paper's lr * min(n / warmup,
sqrt(warmup / n)) (:mod:`tfam.training.optim`). Warmup lasts ``warmup_steps`` optimiser steps
when given, else ``warmup_epochs`` epochs.

Extending a run. ``fit(resume=True)`` with a larger ``epochs`` than the run was started with
continues it: the cosine schedule is re-planned to end at the new last step, from the current
step on (the learning rate steps up where the old plan had already decayed). A resumed run that
has nothing left to do says it is finished.

Files written into ``out_dir`` (by rank 0): ``checkpoints/last.pt`` and ``checkpoints/prev.pt``
(see :mod:`tfam.training.checkpoint`), ``metrics.csv`` (see :mod:`tfam.training.metrics`),
``.tfam-train.lock`` (see :mod:`tfam.training.runlock`), and at the end ``config.json`` +
``model.safetensors`` (``model.save_pretrained``), ``preprocess.json``, ``train_args.json``;
callbacks may add more (``curves.png`` by :class:`tfam.training.callbacks.CurvesCallback`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

import tfam.training.distributed as D  # not via the package face, which imports us
from tfam.training.batching import count_token_batches, dataset_lengths, token_batches
from tfam.training.checkpoint import (
    find_checkpoint,
    load_latest,
    read_checkpoint,
    save_checkpoint,
)
from tfam.training.config import RESUME_FIELDS, TrainConfig
from tfam.training.devices import (
    autocast,
    check_compile_available,
    grad_scaler,
    move_batch,
    resolve_device,
)
from tfam.training.errors import CheckpointSaveError, NonFiniteLossError
from tfam.training.init_weights import load_init_weights
from tfam.training.metrics import MetricsLogger
from tfam.training.optim import WarmupCosine, build_optimizer, build_scheduler
from tfam.training.refit import RefitPlan, join_splits, refit_steps
from tfam.training.results import (
    RESULTS_NAME,
    TrainResult,
    preprocess_info,
    results_record,
    write_json,
)
from tfam.training.runlock import RunLock
from tfam.training.tasks import Batch, ImageClassification, Task, split_batch

__all__ = ["KILL_ENV", "KILL_RANK_ENV", "Trainer", "train"]

# Test hook: with TFAM_TEST_KILL_AT_STEP=k the process SIGKILLs itself right after optimiser
# step k (after any checkpoint due at that step), to prove that kill + resume is exact. With
# TFAM_TEST_KILL_RANK=r only rank r does (a dead rank in a torchrun job).
KILL_ENV = "TFAM_TEST_KILL_AT_STEP"
KILL_RANK_ENV = "TFAM_TEST_KILL_RANK"
CHECKPOINT_DIR = "checkpoints"

Augment = Callable[..., Tensor]


class _Stop(Exception):
    """Internal: leave the loops at a step boundary (Ctrl-C or max_steps)."""


class _SeededItems(torch.utils.data.Dataset):
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


class Trainer:
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
        if config.patience is not None and val_set is None:
            raise ValueError(
                f"patience={config.patience} is invalid without a validation split: early "
                "stopping on the test split would make the test result optimistic; pass val_set"
            )
        if config.refit and val_set is None:
            raise ValueError(
                "refit=True is invalid without a validation split: the refit trains on fit + "
                "val once validation has chosen the run; pass val_set (or refit=False)"
            )
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
        self._init_lines = load_init_weights(model, config.init) if config.init else []
        model.to(self.device)
        self.train_model: nn.Module = D.wrap_model(model, self.dist, self.device, config.fsdp)
        if config.compile:
            check_compile_available(self.device)
            self.train_model = torch.compile(self.train_model)
        # The weights before any step: a refit starts again from them.
        self._initial_weights = self._model_weights() if config.refit else None
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
        # Position in the run. A checkpoint holds all of it.
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
        self._t0 = time.perf_counter()
        self._stop_requested = False
        self._logger: MetricsLogger | None = None
        self._kill_at: int | None = None
        self._lock: RunLock | None = None

    def _plan(self, train_set: Any) -> None:
        """Set up training on ``train_set``: its steps per epoch, the schedule's length, a
        fresh optimiser, scheduler and gradient scaler, and the data and augmentation
        generators seeded from the run's seed (the state of a run before its first step)."""
        config = self.config
        self.train_set = train_set
        # Token batches: every process needs a share of each batch, so at least one example
        # per process (see tfam.training.batching).
        self.lengths: Tensor | None = None
        if config.batch_tokens is not None:
            self.lengths = dataset_lengths(train_set, config.batch_tokens, self.dist.world_size)
            self.steps_per_epoch = count_token_batches(
                self.lengths, config.batch_tokens, self.dist.world_size
            )
        else:
            self.steps_per_epoch = math.ceil(len(train_set) / config.batch_size)
        self.total_steps = config.epochs * self.steps_per_epoch
        self.warmup_steps = (
            config.warmup_steps
            if config.warmup_steps is not None
            else round(config.warmup_epochs * self.steps_per_epoch)
        )
        self.optimizer = build_optimizer(
            self.model, config.lr, config.weight_decay, betas=config.betas, eps=config.eps
        )
        self.scheduler = build_scheduler(
            self.optimizer, self.warmup_steps, self.total_steps, config.min_lr, config.schedule
        )
        self.scaler = grad_scaler(self.device, config.precision)
        rank = self.dist.rank
        # Two generators, so the data order does not depend on whether augmentation draws.
        # The data order is the same on every rank; augmentation and dropout differ per rank
        # (rank 0 keeps the single-process seeds).
        self.data_generator = torch.Generator().manual_seed(config.seed)
        self.augment_generator = torch.Generator().manual_seed(
            config.seed + 1_000_003 + 7_919 * rank
        )

    # -- names --------------------------------------------------------------------------------
    @property
    def checkpoint_dir(self) -> Path | None:
        return self.out_dir / CHECKPOINT_DIR if self.out_dir is not None else None

    @property
    def eval_split(self) -> str:
        """The split evaluated after every epoch: ``val`` when given, else ``test``."""
        return "val" if self.val_set is not None else "test"

    @property
    def columns(self) -> tuple[str, ...]:
        """metrics.csv columns of this run."""
        m = self.task.metrics
        return (
            "epoch",
            "step",
            *(f"train_{k}" for k in m),
            *(f"{self.eval_split}_{k}" for k in m),
            "lr",
            "seconds",
            f"{self.task.unit}_per_s",
            *(("phase",) if self.config.refit else ()),
        )

    @property
    def _unit_short(self) -> str:
        return {"images": "img", "tokens": "tok"}.get(self.task.unit, self.task.unit)

    def elapsed(self) -> float:
        """Seconds of this run so far, summed over resumes."""
        return self._elapsed_base + time.perf_counter() - self._t0

    @staticmethod
    def _zero_sums() -> dict[str, float]:
        return {"seen": 0.0, "train_seconds": 0.0}

    def _say(self, text: str, always: bool = False) -> None:
        if self.dist.is_main and (always or not self.config.quiet):
            from tqdm import tqdm

            tqdm.write(text, file=sys.stdout)
            sys.stdout.flush()

    # -- data ---------------------------------------------------------------------------------
    def _batches(
        self, dataset: Any, index_batches: Sequence[Tensor], epoch: int
    ) -> Iterator[Batch]:
        """The batches of ``index_batches`` (CPU tensors): the task's fast path when the
        dataset has one, else a DataLoader over the items."""
        if not index_batches:
            return
        first = self.task.get_batch(dataset, index_batches[0])
        if first is not None:
            yield first
            for idx in index_batches[1:]:
                batch = self.task.get_batch(dataset, idx)
                assert batch is not None
                yield batch
            return
        loader = torch.utils.data.DataLoader(
            _SeededItems(dataset, self.config.seed, epoch),
            batch_sampler=[idx.tolist() for idx in index_batches],
            collate_fn=self.task.collate,
            num_workers=self.num_workers,
            pin_memory=self.device.type == "cuda",
        )
        yield from loader

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
        return values

    @property
    def _reduce_device(self) -> torch.device:
        # NCCL reduces CUDA tensors only; gloo reduces CPU tensors.
        return self.device if self.device.type == "cuda" else torch.device("cpu")

    def _check_finite(self, local_loss: float) -> None:
        """Every rank agrees on whether the step's loss is finite (one small all-reduce), so a
        divergence stops all of them at the same step."""
        limit = self.config.max_minutes
        time_up = limit is not None and self.elapsed() >= 60.0 * limit
        flags = torch.tensor(
            [
                0.0 if math.isfinite(local_loss) else 1.0,
                1.0 if self._stop_requested else 0.0,
                1.0 if time_up else 0.0,
            ],
            dtype=torch.float64,
            device=self._reduce_device,
        )
        if self.dist.enabled:
            D.all_reduce_tensor(flags, self.dist)
            self._stop_agreed = bool(flags[1] > 0)
        # Every rank stops at the same step: when any of them is out of time.
        self._time_up = bool(flags[2] > 0)
        if flags[0] > 0:
            self._diverged("the loss", local_loss)

    def _diverged(self, what: str, value: float) -> None:
        last = find_checkpoint(self.checkpoint_dir) if self.checkpoint_dir is not None else None
        if last is not None:
            try:
                step = read_checkpoint(last)["global_step"]
                kept = f"the last good checkpoint is kept: {last} (step {step})"
            except ValueError:
                kept = f"the last checkpoint is kept: {last}"
        else:
            kept = "no checkpoint had been written yet"
        lr = self.optimizer.param_groups[0]["lr"]
        raise NonFiniteLossError(
            f"training diverged: {what} is {value} at epoch {self.epoch + 1}, optimiser step "
            f"{self.global_step + 1} (lr {lr:.3g}); stopped without saving the diverged "
            f"weights; {kept}; start again with a lower lr"
        )

    def train_step(self, x: Tensor, y: Tensor) -> tuple[float, int]:
        """One optimiser step on images x (B, C, H, W), labels y (B,) (image classification).
        Returns (summed plain cross-entropy, number correct) over the batch."""
        sums = self.step({"images": x, "labels": y.to(torch.int64)})
        return sums["loss"], int(sums["correct"])

    # -- evaluation ---------------------------------------------------------------------------
    @torch.inference_mode()
    def evaluate_metrics(self, dataset: Any = None) -> dict[str, float] | None:
        """The task's metrics on ``dataset`` (default: the per-epoch split), shared over the
        processes. None if there is no such split, or (single process) if a stop was requested
        while evaluating."""
        if dataset is None:
            dataset = self.val_set if self.val_set is not None else self.test_set
        if dataset is None:
            return None
        # FSDP gathers weights inside forward: every rank runs forward on the raw module
        # the same number of times; DDP's module can run alone.
        model = self.train_model if self.config.fsdp and self.dist.enabled else self.model
        was_training = model.training
        model.eval()
        n = len(dataset)
        size = self.config.eval_batch_size
        chunks, keep = [], []
        for start in range(0, n, size):
            local = D.shard(torch.arange(start, min(start + size, n)), self.dist)
            keep.append(local.numel() > 0)
            chunks.append(local if local.numel() > 0 else torch.zeros(1, dtype=torch.int64))
        sums: dict[str, Tensor] = {}
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

    # -- checkpoints --------------------------------------------------------------------------
    def _rank_state(self) -> dict[str, Any]:
        """This process's own random state and running sums."""
        np_state = np.random.get_state()
        return {
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None,
            "augment": self.augment_generator.get_state(),
            "python": random.getstate(),
            "numpy": {
                "kind": str(np_state[0]),
                "keys": torch.from_numpy(np_state[1].astype(np.int64)),
                "pos": int(np_state[2]),
                "has_gauss": int(np_state[3]),
                "cached_gaussian": float(np_state[4]),
            },
            "sums": dict(self.sums),
        }

    def _set_rank_state(self, rng: dict[str, Any], sums: dict[str, float] | None) -> None:
        torch.set_rng_state(rng["torch"])
        if rng.get("cuda") is not None and self.device.type == "cuda":
            torch.cuda.set_rng_state(rng["cuda"], self.device)
        self.augment_generator.set_state(rng["augment"])
        version, internal, gauss = rng["python"]
        random.setstate((version, tuple(internal), gauss))
        npr = rng["numpy"]
        np.random.set_state(
            (
                npr["kind"],
                npr["keys"].numpy().astype(np.uint32),
                npr["pos"],
                npr["has_gauss"],
                npr["cached_gaussian"],
            )
        )
        if sums is not None:
            self.sums = dict(sums)
            if "count" not in self.sums and "seen" in self.sums:  # a format-1 checkpoint
                self.sums["count"] = self.sums["seen"]

    def _weights_and_optimizer(self) -> tuple[dict[str, Tensor], dict[str, Any]]:
        if self.config.fsdp and self.dist.enabled:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

            options = StateDictOptions(full_state_dict=True, cpu_offload=True)
            return get_state_dict(self.model, self.optimizer, options=options)
        return self.model.state_dict(), self.optimizer.state_dict()

    def _model_weights(self) -> dict[str, Tensor]:
        """A CPU copy of the model's whole weights, the same on every process (a collective
        under FSDP)."""
        if self.config.fsdp and self.dist.enabled:
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                get_model_state_dict,
            )

            weights = get_model_state_dict(
                self.model, options=StateDictOptions(full_state_dict=True)
            )
        else:
            weights = self.model.state_dict()
        return {k: v.detach().to("cpu", copy=True) for k, v in weights.items()}

    def _load_model_weights(self, weights: dict[str, Tensor]) -> None:
        """Copy whole weights (from :meth:`_model_weights`) into the model, on every process."""
        if self.config.fsdp and self.dist.enabled:
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                set_model_state_dict,
            )

            set_model_state_dict(
                self.model, weights, options=StateDictOptions(full_state_dict=True)
            )
        else:
            self.model.load_state_dict(weights)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly: tensors and plain Python values only.
        Distributed: a collective (every rank must call it); rank 0's copy is complete."""
        model_config = getattr(self.model, "config", None)
        mine = self._rank_state()
        ranks = D.all_gather_object(mine, self.dist)
        weights, optimizer = self._weights_and_optimizer()
        rng = {k: v for k, v in mine.items() if k != "sums"}
        rng["data"] = self.data_generator.get_state()
        return {
            "format": 2,
            "model": weights,
            "optimizer": optimizer,
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "rng": rng,
            "ranks": ranks if self.dist.enabled else None,
            "world_size": self.dist.world_size,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "global_step": self.global_step,
            "permutation": self.permutation,
            "batch_offsets": self.batch_offsets,
            "sums": dict(self.sums),
            "history": [dict(r) for r in self.history],
            "elapsed": self.elapsed(),
            "stopped_early": self.stopped_early,
            # Refit: the phase, the refit's plan (phase 2), the initial weights (phase 1).
            "phase": self.phase,
            "refit": self.refit_plan.to_dict() if self.refit_plan is not None else None,
            "refit_init": self._initial_weights if self.phase == 1 else None,
            "config": self.config.to_dict(),
            "model_config": model_config.to_dict() if hasattr(model_config, "to_dict") else None,
        }

    def load_state_dict(self, state: dict[str, Any], source: str = "checkpoint") -> None:
        """Restore a :meth:`state_dict`; refuses one from a run with other settings."""
        saved_cfg = dict(state["config"])
        saved_cfg.setdefault("precision", "bf16" if saved_cfg.get("bf16") else "fp32")
        # Checkpoints from before these fields existed ran with their defaults.
        saved_cfg.setdefault("warmup_steps", None)
        saved_cfg.setdefault("schedule", "cosine")
        saved_cfg.setdefault("batch_tokens", None)
        saved_cfg.setdefault("refit", False)
        mine = self.config.to_dict()
        for name in RESUME_FIELDS:
            a, b = saved_cfg.get(name), mine[name]
            if (list(a) if isinstance(a, list | tuple) else a) != (
                list(b) if isinstance(b, list | tuple) else b
            ):
                raise ValueError(
                    f"cannot resume from {source}: it was trained with {name}={a!r}, this run "
                    f"asks for {name}={b!r}; use the same {name} to resume, or another output "
                    "directory to start a new run"
                )
        model_config = getattr(self.model, "config", None)
        if state.get("model_config") is not None and hasattr(model_config, "to_dict"):
            saved, now = state["model_config"], model_config.to_dict()
            diff = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))
            if diff:
                k = diff[0]
                raise ValueError(
                    f"cannot resume from {source}: its model has {k}={saved.get(k)!r}, this "
                    f"model has {k}={now.get(k)!r} (differing fields: {', '.join(diff)})"
                )
        saved_epochs = int(saved_cfg.get("epochs", self.config.epochs))
        if int(state.get("phase", 1)) == 2:
            self._resume_refit(RefitPlan.from_dict(state["refit"]), saved_epochs, source)
        elif state.get("refit_init") is not None:
            self._initial_weights = state["refit_init"]
        if self.config.fsdp and self.dist.enabled:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

            set_state_dict(
                self.model,
                self.optimizer,
                model_state_dict=state["model"],
                optim_state_dict=state["optimizer"],
                options=StateDictOptions(full_state_dict=True),
            )
        else:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler is not None and state.get("scaler") is not None:
            self.scaler.load_state_dict(state["scaler"])
        self.data_generator.set_state(state["rng"]["data"])
        ranks = state.get("ranks")
        saved_world = int(state.get("world_size", 1))
        if saved_world == self.dist.world_size:
            if ranks:
                own = ranks[self.dist.rank]
                self._set_rank_state(own, own["sums"])
            else:
                self._set_rank_state(state["rng"], state["sums"])
        else:
            self._say(
                f"note: {source} was written by {saved_world} process(es), this run has "
                f"{self.dist.world_size}: the data order continues exactly, the augmentation "
                "and dropout streams are seeded afresh per process (not bit-exact)",
                always=True,
            )
            if self.dist.is_main:
                self._set_rank_state(state["rng"], None)
            else:  # a stream of its own, reproducible from the seed, rank and step
                seed = self.config.seed + 104_729 * self.dist.rank + int(state["global_step"])
                torch.manual_seed(seed)
                random.seed(seed)
                np.random.seed(seed % 2**32)
            self.sums = self._zero_sums()
        self.epoch = int(state["epoch"])
        self.batch_in_epoch = int(state["batch_in_epoch"])
        self.global_step = int(state["global_step"])
        self.permutation = state["permutation"]
        self.batch_offsets = state.get("batch_offsets")
        self.history = [dict(r) for r in state["history"]]
        self.stopped_early = bool(state.get("stopped_early", False))
        self._elapsed_base = float(state["elapsed"])
        self._t0 = time.perf_counter()
        if saved_epochs != self.config.epochs:
            self._replan(saved_epochs)

    def _replan(self, saved_epochs: int) -> None:
        """Stretch (or shrink) the cosine schedule to the new ``epochs`` from the current step
        on; the learning rate of the next step follows the new plan."""
        for factor in self.scheduler.lr_lambdas:
            if isinstance(factor, WarmupCosine):
                factor.total_steps = self.total_steps
        step = self.scheduler.last_epoch
        for group, base, factor in zip(
            self.optimizer.param_groups, self.scheduler.base_lrs, self.scheduler.lr_lambdas
        ):
            group["lr"] = base * factor(step)
        self.scheduler._last_lr = [g["lr"] for g in self.optimizer.param_groups]
        if self.epoch < self.config.epochs and not self.stopped_early:
            self._say(
                f"extending the run from {saved_epochs} to {self.config.epochs} epochs: the "
                f"learning-rate schedule is re-planned to end at step {self.total_steps}"
            )

    def save(self) -> Path | None:
        """Write a checkpoint of the current step boundary (no-op without out_dir). Every
        process takes part (their random states are gathered); rank 0 writes; all wait."""
        if self.checkpoint_dir is None:
            return None
        state = self.state_dict()
        path = None
        error: str | None = None
        if self.dist.is_main:
            try:
                path = save_checkpoint(
                    state,
                    self.checkpoint_dir,
                    epoch=self.epoch,
                    batch_in_epoch=self.batch_in_epoch,
                    global_step=self.global_step,
                )
            except OSError as err:
                error = self._save_error(err)
        D.barrier(self.dist)
        if error is not None:
            raise CheckpointSaveError(error)
        return path

    def _save_error(self, err: OSError) -> str:
        previous = find_checkpoint(self.checkpoint_dir) if self.checkpoint_dir is not None else None
        kept = (
            f"the previous checkpoint {previous} is intact; free space and resume from it"
            if previous is not None
            else "no earlier checkpoint exists"
        )
        reason = err.strerror or str(err)
        return (
            f"could not write a checkpoint into {self.checkpoint_dir} at step "
            f"{self.global_step}: {reason}; {kept}"
        )

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
        kill = os.environ.get(KILL_ENV)
        kill_rank = os.environ.get(KILL_RANK_ENV)
        self._kill_at = (
            int(kill) if kill and (not kill_rank or int(kill_rank) == self.dist.rank) else None
        )
        previous_handler = None
        if threading.current_thread() is threading.main_thread():
            previous_handler = signal.signal(signal.SIGINT, self._on_sigint)
        stopped = False
        try:
            try:
                while self.phase == 1 and self.epoch < cfg.epochs and not self.stopped_early:
                    self._train_epoch()
                    self._end_epoch()
            except _Stop:
                if self._stop_requested or not cfg.refit:
                    raise
                self._say_limit()  # max_steps or max_minutes ended the selection run
            if cfg.refit:
                self._refit()
        except _Stop:
            stopped = True
        finally:
            if previous_handler is not None:
                signal.signal(signal.SIGINT, previous_handler)
            if self._logger is not None:
                self._logger.close()
        if stopped and self._stop_requested:
            path = self.save()
            where = f" to {path}" if path else ""
            hint = self.resume_hint or "Trainer(...).fit(resume=True) with the same out_dir"
            what = "refit epoch" if self.phase == 2 else "epoch"
            if self.dist.is_main:
                print(
                    f"\ninterrupted at {what} {self.epoch + 1}, step {self.global_step}: "
                    f"checkpoint saved{where}.\nresume with: {hint}",
                    file=sys.stderr,
                    flush=True,
                )
            raise KeyboardInterrupt
        if stopped:  # max_steps or max_minutes
            self.save()
            self._say_limit()
        return self._finish(stopped_early=stopped or self.stopped_early)

    def _say_limit(self) -> None:
        if self._time_up:
            self._say(
                f"stopped after max_minutes={self.config.max_minutes:g} at step {self.global_step}"
            )
        else:
            self._say(f"stopped after max_steps={self.config.max_steps} optimiser steps")

    # -- refit (see tfam.training.refit) ------------------------------------------------------
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
                raise _Stop  # Ctrl-C while evaluating: the resumed run evaluates again
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
        self._load_model_weights(self._initial_weights)
        self._initial_weights = None
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

    def _fmt_metric(self, v: float) -> str:
        return f"{100 * v:.2f}%" if self.task.primary_metric == "acc" else f"{v:.4f}"

    def _prepare_out_dir(self) -> None:
        assert self.out_dir is not None
        out = self.out_dir
        for p in (out, *out.parents):
            if p.exists() and not p.is_dir():
                raise ValueError(f"out_dir={str(out)!r} is invalid: {p} is a file, not a directory")
            if p.exists():
                break
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ValueError(
                f"out_dir={str(out)!r} is invalid: cannot create it ({err.strerror or err})"
            ) from None
        self._lock = RunLock(out)
        self._lock.acquire()

    def _start(self, resume: bool) -> bool:
        """Load the checkpoint (resume) or seed a fresh run. False when a resumed run has
        nothing left to do."""
        cfg = self.config
        ckpt_dir = self.checkpoint_dir
        if resume and ckpt_dir is None:
            raise ValueError("resume=True needs an out_dir that holds the checkpoints")
        path: Path | None = None
        state: dict[str, Any] | None = None
        if ckpt_dir is not None and self.dist.is_main:
            if resume:
                loaded = load_latest(ckpt_dir)  # may move a bad last.pt aside: rank 0 only
                if loaded is not None:
                    state, path = loaded
            elif find_checkpoint(ckpt_dir) is not None:
                raise ValueError(
                    f"out_dir {self.out_dir} already holds a training checkpoint "
                    f"({find_checkpoint(ckpt_dir)}); resume it (--resume / fit(resume=True)) or "
                    "choose another output directory"
                )
            saved_model = self.out_dir / "model.safetensors" if self.out_dir else None
            if path is None and saved_model is not None and saved_model.exists():
                raise ValueError(
                    f"out_dir {self.out_dir} holds a saved model ({saved_model}) but no "
                    "training checkpoint: training there would overwrite it; choose another "
                    "output directory (or start from that model with init)"
                )
        path = D.broadcast_object(path, self.dist)
        if path is not None:
            self.load_state_dict(state or read_checkpoint(path), source=str(path))
            if self._run_finished():
                return False
            where = f"epoch {self.epoch + 1}/{cfg.epochs}"
            if self.phase == 2 and self.refit_plan is not None:
                where = f"refit epoch {self.epoch + 1}/{self.refit_plan.epochs_text}"
            self._say(
                f"resumed from {path}: {where}, step "
                f"{self.batch_in_epoch}/{self.steps_per_epoch} of the epoch, "
                f"{self.global_step} optimiser steps done"
            )
            return True
        if resume:
            self._say(f"no checkpoint in {ckpt_dir}; starting a new run")
        for line in self._init_lines:
            self._say(line, always=True)
        self._seed_streams()
        self._t0 = time.perf_counter()
        return True

    def _seed_streams(self) -> None:
        """Seed every RNG a fresh run may touch (dropout, drop-path, user code); each process
        has its own stream, rank 0 the single-process one."""
        seed = self.config.seed + 104_729 * self.dist.rank
        torch.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed % 2**32)

    def _finished_result(self) -> TrainResult:
        cfg = self.config
        plan = self.refit_plan
        if plan is not None:
            self._say(
                f"the run in {self.out_dir} is already finished: after a selection run of "
                f"{plan.selection_epochs} epochs, its refit trained on fit + val for "
                f"{plan.epochs_text} epochs; nothing to do. To train longer, start a new run "
                "with a larger epochs (a refit run cannot be extended)",
                always=True,
            )
            return self._result({}, {}, plan.selection_stopped, already_finished=True)
        how = (
            f"it stopped early at epoch {self.epoch} (no better {self.eval_split} "
            f"{self.task.primary_metric} for {cfg.patience} epochs)"
            if self.stopped_early
            else f"it has done {self.epoch} epochs ({self.global_step} optimiser steps) of the "
            f"{cfg.epochs} asked"
        )
        self._say(
            f"the run in {self.out_dir} is already finished: {how}; nothing to do. To train "
            f"longer, resume with a larger epochs (--epochs N, now {cfg.epochs})",
            always=True,
        )
        return self._result({}, {}, self.stopped_early, already_finished=True)

    def _on_sigint(self, signum: int, frame: Any) -> None:
        if self._stop_requested:
            raise KeyboardInterrupt  # second Ctrl-C: abort now
        self._stop_requested = True
        if self.dist.is_main:
            print(
                "\nCtrl-C: stopping after this step and saving a checkpoint "
                "(Ctrl-C again to abort at once)",
                file=sys.stderr,
                flush=True,
            )

    def _check_stop(self) -> None:
        # Distributed: the stop flag travels with each step's all-reduce, so every rank stops
        # at the same step boundary.
        requested = self._stop_agreed if self.dist.enabled else self._stop_requested
        if requested:
            self._stop_requested = True
            raise _Stop
        if self.phase == 2:
            return  # the refit's length is its plan's; max_steps and max_minutes bound selection
        if self.config.max_steps is not None and self.global_step >= self.config.max_steps:
            raise _Stop
        if self._time_up:
            raise _Stop

    _stop_agreed = False
    _time_up = False

    def _epoch_batches(self) -> Iterator[Batch]:
        cfg = self.config
        assert self.permutation is not None
        offsets = self.batch_offsets
        indices = []
        for b in range(self.batch_in_epoch, self.steps_per_epoch):
            if offsets is not None:
                idx = self.permutation[int(offsets[b]) : int(offsets[b + 1])]
            else:
                idx = self.permutation[b * cfg.batch_size : (b + 1) * cfg.batch_size]
            indices.append(D.shard(idx, self.dist))
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
                    shown = self.task.reduce(s)
                    post = {k: f"{v:.4f}" for k, v in shown.items() if k != "acc"}
                    if "acc" in shown:
                        post["acc"] = f"{100 * shown['acc']:.2f}%"
                    post[f"{self._unit_short}/s"] = (
                        f"{s['seen'] * self.dist.world_size / max(s['train_seconds'], 1e-9):.0f}"
                    )
                    bar.set_postfix(post, refresh=False)
                if cfg.save_every and self.global_step % cfg.save_every == 0:
                    self.save()
                if self._kill_at is not None and self.global_step == self._kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
        finally:
            bar.close()
            if hasattr(batches, "close"):
                batches.close()

    def _units(self, batch: Batch) -> float:
        """The batch's size in the task's unit, for throughput: ``task.units(batch)`` when the
        task counts something other than rows (tokens, characters), else the rows."""
        units = getattr(self.task, "units", None)
        if units is not None:
            return float(units(batch))
        return float(next(iter(batch.values())).shape[0])

    def _end_epoch(self) -> None:
        cfg = self.config
        # The refit has no held-out data left to evaluate on.
        result = self.evaluate_metrics() if self.phase == 1 else None
        if self._stop_requested and not self.dist.enabled:
            raise _Stop  # evaluation was cut short; the resumed run evaluates again
        split = self.eval_split
        own = {k: v for k, v in self.sums.items() if k != "train_seconds"}
        s = D.all_reduce_sums(own, self.dist, self._reduce_device)
        train = self.task.reduce(s)
        # Refit rows continue the epoch numbers after the selection run's (column "phase": 2).
        offset = self.refit_plan.selection_epochs if self.refit_plan is not None else 0
        row: dict[str, Any] = {"epoch": offset + self.epoch + 1, "step": self.global_step}
        for k in self.task.metrics:
            row[f"train_{k}"] = train.get(k, math.nan)
        for k in self.task.metrics:
            row[f"{split}_{k}"] = result.get(k, math.nan) if result is not None else math.nan
        row["lr"] = self.optimizer.param_groups[0]["lr"]
        row["seconds"] = self.elapsed()
        row[f"{self.task.unit}_per_s"] = s["seen"] / max(self.sums["train_seconds"], 1e-9)
        if cfg.refit:
            row["phase"] = self.phase
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
        self.save()
        if self.dist.is_main:
            for cb in self.callbacks:
                if hasattr(cb, "on_epoch_end"):
                    cb.on_epoch_end(self, row)
        self._say(self._epoch_line(row))
        if self.stopped_early:
            self._say(
                f"early stop: no better {split} {self.task.primary_metric} for "
                f"{cfg.patience} epochs (best at epoch {self._best_row()['epoch']})"
            )

    def _epoch_line(self, row: dict[str, Any]) -> str:
        cfg = self.config
        width = len(str(cfg.epochs))
        parts = [f"epoch {row['epoch']:>{width}}/{cfg.epochs} "]
        splits: tuple[str, ...] = ("train", self.eval_split)
        plan = self.refit_plan
        if self.phase == 2 and plan is not None:
            epoch = int(row["epoch"]) - plan.selection_epochs
            parts = [f"refit epoch {epoch:>{width}}/{plan.epochs_text} "]
            splits = ("train",)
        for split in splits:
            text = [split]
            for k in self.task.metrics:
                v = row[f"{split}_{k}"]
                text.append(f"acc {100 * v:6.2f}%" if k == "acc" else f"{k} {v:.4f}")
            parts.append(" ".join(text) + " ")
        unit = f"{self.task.unit}_per_s"
        parts.append(
            f"lr {row['lr']:.2e}  {row[unit]:.0f} {self._unit_short}/s  {row['seconds']:.1f} s"
        )
        return " ".join(parts)

    # -- best ---------------------------------------------------------------------------------
    def _score(self, row: dict[str, Any]) -> float:
        return float(row.get(f"{self.eval_split}_{self.task.primary_metric}", math.nan))

    def _best_row(self) -> dict[str, Any] | None:
        scored = [r for r in self.history if not math.isnan(self._score(r))]
        if not scored:
            return None
        sign = 1.0 if self.task.higher_is_better else -1.0
        # max() keeps the first of equal scores: the earliest epoch that reached the best.
        return max(scored, key=lambda r: sign * self._score(r))

    def _epochs_since_best(self) -> int:
        best = self._best_row()
        return 0 if best is None else self.epoch - int(best["epoch"])

    # -- the end ------------------------------------------------------------------------------
    def _write_run_files(self, final: bool) -> None:
        assert self.out_dir is not None
        self.out_dir.mkdir(parents=True, exist_ok=True)
        args = {**self.run_args, "train_config": self.config.to_dict()}
        write_json(self.out_dir / "train_args.json", args)
        info = preprocess_info(self.train_set)
        if info is not None:
            write_json(self.out_dir / "preprocess.json", info)
        if final and hasattr(self.model, "save_pretrained"):
            try:
                self._plain_model().save_pretrained(self.out_dir)
            except OSError as err:
                raise CheckpointSaveError(
                    f"could not write the final model into {self.out_dir}: "
                    f"{err.strerror or err}; the last checkpoint in {self.checkpoint_dir} is "
                    "intact (resume writes the model again)"
                ) from None

    def _plain_model(self) -> nn.Module:
        """The model with whole (unsharded) weights on rank 0."""
        if self._full_weights is None:
            return self.model
        plain = type(self.model)(self.model.config)
        plain.load_state_dict(self._full_weights)
        return plain

    _full_weights: dict[str, Tensor] | None = None

    def _final_row_metrics(self) -> dict[str, float]:
        rows = [r for r in self.history if r.get("phase", 1) == 1]  # refit rows have no scores
        if not rows:
            return {}
        row = rows[-1]
        return {k: row.get(f"{self.eval_split}_{k}", math.nan) for k in self.task.metrics}

    def _finish(self, stopped_early: bool) -> TrainResult:
        if self.refit_plan is not None:  # the selection run's scores; test is the refit's
            per_epoch = dict(self.refit_plan.selection_val)
            stopped_early = self.refit_plan.selection_stopped
        elif self.history and self.batch_in_epoch == 0:
            per_epoch = self._final_row_metrics()
        else:  # stopped mid-epoch: evaluate the weights as they are
            per_epoch = self.evaluate_metrics() or {}
        if self.val_set is not None:
            test = (self.evaluate_metrics(self.test_set) or {}) if self.test_set is not None else {}
            result = self._result(test, per_epoch, stopped_early)
        else:
            result = self._result(per_epoch if self.test_set is not None else {}, {}, stopped_early)
        if self.config.fsdp and self.dist.enabled:
            self._full_weights = self._weights_and_optimizer()[0]  # a collective
        if self.out_dir is not None and self.dist.is_main:
            self._write_run_files(final=True)
            write_json(self.out_dir / RESULTS_NAME, results_record(result))
        D.barrier(self.dist)
        if self.dist.is_main:
            for cb in self.callbacks:
                if hasattr(cb, "on_finish"):
                    cb.on_finish(self, result)
        # Said even when quiet: the one line a scripted run needs (nothing without a score).
        scored = bool(result.test_metrics or result.val_metrics)
        self._say(self._final_line(result), always=scored)
        return result

    def _result(
        self,
        test: dict[str, float],
        val: dict[str, float],
        stopped_early: bool,
        already_finished: bool = False,
    ) -> TrainResult:
        if self.val_set is None and not test and self.test_set is not None:
            test = self._final_row_metrics()
        best = self._best_row()
        best_score = self._score(best) if best is not None else math.nan
        has_val = self.val_set is not None
        if has_val and not val:
            val = self._final_row_metrics()
        final_test_acc = test.get("acc", math.nan)
        best_test = math.nan if has_val else (best_score if best is not None else final_test_acc)
        plan = self.refit_plan
        refit: dict[str, Any] = {}
        if plan is not None:
            refit = {
                "epochs": plan.epochs,
                "steps": self.global_step - plan.selection_steps,
                "examples": plan.examples,
            }
        return TrainResult(
            final_test_acc=final_test_acc,
            final_test_loss=test.get("loss", math.nan),
            best_test_acc=best_test,
            best_epoch=int(best["epoch"]) if best is not None else self.epoch,
            epochs_completed=plan.selection_epochs if plan is not None else self.epoch,
            steps=self.global_step,
            seconds=self.elapsed(),
            stopped_early=stopped_early,
            history=[dict(r) for r in self.history],
            out_dir=self.out_dir,
            final_val_acc=val.get("acc", math.nan),
            final_val_loss=val.get("loss", math.nan),
            best_val_acc=best_score if has_val and best is not None else math.nan,
            test_metrics=dict(test),
            val_metrics=dict(val),
            already_finished=already_finished,
            refit=refit,
        )

    def _final_line(self, r: TrainResult) -> str:
        metric = self.task.primary_metric
        test = r.test_metrics.get(metric, math.nan)
        if math.isnan(test) and not r.val_metrics:
            return f"{self.epoch} epochs, {self.global_step} steps in {r.seconds:.1f} s"

        fmt = self._fmt_metric
        name = "accuracy" if metric == "acc" else metric
        text = f"final test {name} {fmt(test)}" if not math.isnan(test) else "no test split"
        best = self._best_row()
        plan = self.refit_plan
        chosen = ""
        if best is not None:
            chosen = f"best {self.eval_split} {fmt(self._score(best))} at epoch {best['epoch']}"
        if plan is not None:
            if not math.isnan(test):
                text += " of the refit model"
            unit = "images" if self.task.unit == "images" else "examples"
            chosen = f"{chosen} of {plan.selection_epochs}" if chosen else "no val score"
            text += (
                f" (trained on fit + val, {plan.examples} {unit}, for {plan.epochs_text} epochs; "
                f"selection run: {chosen})"
            )
            epochs = f"{plan.selection_epochs} + {plan.epochs_text} epochs"
        else:
            text += f" ({chosen})" if chosen else ""
            epochs = f"{self.epoch} epochs"
        text += f"; {epochs}, {self.global_step} steps in {r.seconds:.1f} s"
        if self.out_dir is not None:
            text += f"; model and logs in {self.out_dir}"
        return text


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
