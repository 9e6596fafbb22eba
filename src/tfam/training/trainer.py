"""The image-classification trainer: AdamW + warmup/cosine, clipping, accumulation, label
smoothing, bf16 autocast, per-epoch evaluation and logging, and exact kill/resume.

    torch.manual_seed(0)
    model = tfam.create_model("vit_digits")
    train, test = load_dataset("digits", "train"), load_dataset("digits", "test")
    config = TrainConfig(epochs=100, batch_size=128, lr=2e-3)
    result = Trainer(model, train, test, config, out_dir="runs/digits",
                     augment=default_augment("digits")).fit()
    print(result.final_test_acc, result.best_test_acc)

What "exact" means here. Every random draw of a run comes from state that the checkpoint
holds: the data order of an epoch is ``torch.randperm`` with the trainer's data generator, the
augmentation draws from the trainer's augmentation generator, dropout and drop-path from the
global torch RNG; Python's and NumPy's RNGs are saved too. A checkpoint is taken between two
optimiser steps and stores the model, the optimiser and scheduler, all those RNG states, the
epoch, the step within the epoch, the epoch's permutation and the epoch's running sums. So a
run killed at any instant and resumed with ``fit(resume=True)`` performs the same arithmetic in
the same order as one that was never stopped, and ends with bit-for-bit identical weights (on
the same machine, torch build and thread count).

Batches and accumulation. ``batch_size`` is the number of images per optimiser step. With
``accum_steps = K`` each batch is cut into K micro-batches whose gradients are summed before
the step (each micro-batch loss is scaled by its share of the batch), so K changes memory, not
the result (up to floating-point rounding). One epoch is ceil(N / batch_size) steps; the last
batch of an epoch may be smaller.

Files written into ``out_dir``: ``checkpoints/last.pt`` and ``checkpoints/prev.pt`` (see
:mod:`tfam.training.checkpoint`), ``metrics.csv`` (see :mod:`tfam.training.metrics`), and at
the end ``config.json`` + ``model.safetensors`` (``model.save_pretrained``),
``preprocess.json``, ``train_args.json`` and ``curves.png``.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tfam.training.checkpoint import (
    atomic_write_bytes,
    find_checkpoint,
    load_latest,
    save_checkpoint,
)
from tfam.training.metrics import MetricsLogger
from tfam.training.optim import build_optimizer, build_scheduler

__all__ = ["KILL_ENV", "TrainConfig", "TrainResult", "Trainer", "preprocess_info", "train"]

# Test hook: with TFAM_TEST_KILL_AT_STEP=k the process SIGKILLs itself right after optimiser
# step k (after any checkpoint due at that step), to prove that kill + resume is exact.
KILL_ENV = "TFAM_TEST_KILL_AT_STEP"
CHECKPOINT_DIR = "checkpoints"

Augment = Callable[..., Tensor]

# Settings that change the arithmetic of a run: resuming with other values would not continue
# the same run, so it is refused. The others (logging, saving, stopping early) may change.
_RESUME_FIELDS = (
    "epochs",
    "batch_size",
    "lr",
    "min_lr",
    "weight_decay",
    "betas",
    "eps",
    "warmup_epochs",
    "label_smoothing",
    "clip_grad",
    "accum_steps",
    "bf16",
    "seed",
)


@dataclass
class TrainConfig:
    """Settings of a training run (see the module docstring for the meaning of batches).

    ``lr`` is the peak rate reached after ``warmup_epochs`` (may be fractional, rounded to whole
    optimiser steps); the cosine then brings it to ``min_lr`` at the last step. ``clip_grad``:
    max global grad norm, 0 or None disables. ``save_every``: also checkpoint every this many
    optimiser steps (0: only at epoch ends). ``max_steps``: stop after this many optimiser steps
    in total (smoke runs; the schedule still spans ``epochs``). ``progress``: tqdm bar, None =
    only when stderr is a terminal and not ``quiet``; ``quiet`` also silences the per-epoch lines.
    """

    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3
    min_lr: float = 1e-5
    weight_decay: float = 0.05
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    warmup_epochs: float = 1.0
    label_smoothing: float = 0.0
    clip_grad: float | None = 1.0
    accum_steps: int = 1
    bf16: bool = False
    seed: int = 0
    save_every: int = 0
    eval_batch_size: int = 1000
    max_steps: int | None = None
    quiet: bool = False
    progress: bool | None = None
    tensorboard: bool = True

    def __post_init__(self) -> None:
        def positive_int(name: str, allow_zero: bool = False) -> None:
            v = getattr(self, name)
            if (
                isinstance(v, bool)
                or not isinstance(v, int)
                or v < 0
                or (v == 0 and not allow_zero)
            ):
                need = "an int >= 0" if allow_zero else "an int >= 1"
                raise ValueError(f"{name}={v!r} is invalid: expected {need}")

        def number(name: str, lo: float, hi: float = math.inf, lo_open: bool = False) -> None:
            v = getattr(self, name)
            ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            ok = ok and (v > lo if lo_open else v >= lo) and v <= hi
            if not ok:
                bracket = "(" if lo_open else "["
                raise ValueError(
                    f"{name}={v!r} is invalid: expected a number in {bracket}{lo}, {hi}]"
                )

        for name in ("epochs", "batch_size", "accum_steps", "eval_batch_size"):
            positive_int(name)
        positive_int("save_every", allow_zero=True)
        positive_int("seed", allow_zero=True)
        if self.max_steps is not None:
            positive_int("max_steps")
        number("lr", 0.0, lo_open=True)
        number("min_lr", 0.0, self.lr)
        number("weight_decay", 0.0)
        number("eps", 0.0, lo_open=True)
        number("warmup_epochs", 0.0, float(self.epochs))
        number("label_smoothing", 0.0, 0.999)
        if self.clip_grad is not None:
            number("clip_grad", 0.0)
        if self.accum_steps > self.batch_size:
            raise ValueError(
                f"accum_steps={self.accum_steps} is invalid: a batch of batch_size="
                f"{self.batch_size} images cannot be cut into more micro-batches than images"
            )
        betas = tuple(self.betas)
        if len(betas) != 2 or not all(isinstance(b, int | float) and 0 <= b < 1 for b in betas):
            raise ValueError(f"betas={self.betas!r} is invalid: expected two floats in [0, 1)")
        self.betas = (float(betas[0]), float(betas[1]))

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["betas"] = list(self.betas)
        return d


@dataclass
class TrainResult:
    """What a finished (or stopped) run reached. Accuracies are fractions in [0, 1].

    ``best_test_acc`` / ``best_epoch``: the best end-of-epoch test accuracy (the final one, and
    epoch 0, if no epoch was completed).
    """

    final_test_acc: float
    final_test_loss: float
    best_test_acc: float
    best_epoch: int
    epochs_completed: int
    steps: int
    seconds: float
    stopped_early: bool
    history: list[dict[str, Any]] = field(default_factory=list)
    out_dir: Path | None = None


def preprocess_info(dataset: Any) -> dict[str, Any] | None:
    """OUT/preprocess.json contents for a tfam ImageDataset (None if it lacks the facts)."""
    needed = ("mean", "std", "classes", "image_size", "in_channels", "pixel_scale")
    if not all(hasattr(dataset, a) for a in needed):
        return None
    size = dataset.image_size
    size = [int(size), int(size)] if isinstance(size, int) else [int(s) for s in size]
    return {
        "dataset": getattr(dataset, "name", "custom"),
        "image_size": size,
        "in_channels": int(dataset.in_channels),
        "mean": [float(v) for v in torch.as_tensor(dataset.mean).reshape(-1).tolist()],
        "std": [float(v) for v in torch.as_tensor(dataset.std).reshape(-1).tolist()],
        "classes": [str(c) for c in dataset.classes],
        "pixel_scale": float(dataset.pixel_scale),
    }


def _write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, default=str) + "\n").encode())


class _Stop(Exception):
    """Internal: leave the loops at a step boundary (Ctrl-C or max_steps)."""


class Trainer:
    """Trains a classifier ``model(x (B, C, H, W)) -> logits (B, num_classes)``.

    train_set / test_set: datasets of (image (C, H, W) float, label int); a ``get_batch(indices)
    -> (images (B, C, H, W), labels (B,))`` method is used when present (one gather per batch),
    otherwise items are stacked one by one. test_set may be None (no evaluation).
    augment: optional ``(images, generator) -> images`` applied to training batches; when it
    also takes ``fill`` and the dataset has ``black`` (tfam's BatchAugment and ImageDataset),
    padding is filled with the dataset's normalised black.
    out_dir: where checkpoints, metrics and the final model go; None keeps everything in memory.
    run_args: extra facts for train_args.json (the CLI puts its arguments there).
    resume_hint: the command that resumes this run, printed after Ctrl-C.
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
    ) -> None:
        self.config = config = config or TrainConfig()
        if len(train_set) == 0:
            raise ValueError("train_set is empty: nothing to train on")
        self.model = model
        self.train_set = train_set
        self.test_set = test_set
        self.augment = augment
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.run_args = dict(run_args or {})
        self.resume_hint = resume_hint
        self.steps_per_epoch = math.ceil(len(train_set) / config.batch_size)
        self.total_steps = config.epochs * self.steps_per_epoch
        self.warmup_steps = round(config.warmup_epochs * self.steps_per_epoch)
        self.optimizer = build_optimizer(
            model, config.lr, config.weight_decay, betas=config.betas, eps=config.eps
        )
        self.scheduler = build_scheduler(
            self.optimizer, self.warmup_steps, self.total_steps, config.min_lr
        )
        # Two generators, so the data order does not depend on whether augmentation draws.
        self.data_generator = torch.Generator().manual_seed(config.seed)
        self.augment_generator = torch.Generator().manual_seed(config.seed + 1_000_003)
        self._augment_takes_fill = augment is not None and _accepts(augment, "fill")
        self.show_progress = (
            config.progress
            if config.progress is not None
            else (not config.quiet and sys.stderr.isatty())
        )
        # Position in the run. A checkpoint holds all of it.
        self.epoch = 0  # completed epochs
        self.batch_in_epoch = 0  # optimiser steps done in the current epoch
        self.global_step = 0
        self.permutation: Tensor | None = None  # data order of the current epoch
        self.sums = self._zero_sums()
        self.history: list[dict[str, Any]] = []
        self._elapsed_base = 0.0
        self._t0 = time.perf_counter()
        self._stop_requested = False
        self._logger: MetricsLogger | None = None
        self._kill_at = None

    # -- paths --------------------------------------------------------------------------------
    @property
    def checkpoint_dir(self) -> Path | None:
        return self.out_dir / CHECKPOINT_DIR if self.out_dir is not None else None

    def elapsed(self) -> float:
        """Seconds of this run so far, summed over resumes."""
        return self._elapsed_base + time.perf_counter() - self._t0

    @staticmethod
    def _zero_sums() -> dict[str, float]:
        return {"loss": 0.0, "correct": 0.0, "seen": 0.0, "train_seconds": 0.0}

    def _say(self, text: str, always: bool = False) -> None:
        if always or not self.config.quiet:
            from tqdm import tqdm

            tqdm.write(text, file=sys.stdout)
            sys.stdout.flush()

    # -- data ---------------------------------------------------------------------------------
    def _batch(self, dataset: Any, indices: Tensor) -> tuple[Tensor, Tensor]:
        if hasattr(dataset, "get_batch"):
            x, y = dataset.get_batch(indices)
        else:  # the slow path: any map-style dataset, no DataLoader
            items = [dataset[int(i)] for i in indices]
            x = torch.stack([torch.as_tensor(item[0]) for item in items])
            y = torch.as_tensor([int(item[1]) for item in items], dtype=torch.int64)
        return x, y.to(torch.int64)

    def _augmented(self, x: Tensor) -> Tensor:
        if self.augment is None:
            return x
        if self._augment_takes_fill and hasattr(self.train_set, "black"):
            return self.augment(x, self.augment_generator, fill=self.train_set.black)
        return self.augment(x, self.augment_generator)

    def _autocast(self) -> torch.autocast:
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.config.bf16)

    # -- one optimiser step -------------------------------------------------------------------
    def train_step(self, x: Tensor, y: Tensor) -> tuple[float, int]:
        """One optimiser step on images x (B, C, H, W), labels y (B,), in ``accum_steps``
        micro-batches. Returns (summed plain cross-entropy, number correct) over the batch."""
        cfg = self.config
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        total = y.shape[0]
        ce_sum = torch.zeros((), dtype=torch.float64)
        correct = 0
        for xs, ys in zip(x.tensor_split(cfg.accum_steps), y.tensor_split(cfg.accum_steps)):
            if ys.numel() == 0:
                continue
            with self._autocast():
                logits = self.model(xs)
            logits = logits.float()
            # Sum over the micro-batch / size of the whole batch: the K backward passes add up
            # to the gradient of the batch mean.
            loss = F.cross_entropy(logits, ys, reduction="sum", label_smoothing=cfg.label_smoothing)
            (loss / total).backward()
            with torch.no_grad():
                plain = (
                    loss
                    if cfg.label_smoothing == 0
                    else F.cross_entropy(logits, ys, reduction="sum")
                )
                ce_sum += plain.double()
                correct += int((logits.argmax(dim=1) == ys).sum())
        if cfg.clip_grad:
            nn.utils.clip_grad_norm_(self.model.parameters(), cfg.clip_grad)
        self.optimizer.step()
        self.scheduler.step()
        return float(ce_sum), correct

    # -- evaluation ---------------------------------------------------------------------------
    @torch.inference_mode()
    def evaluate(self, dataset: Any = None) -> tuple[float, float] | None:
        """(mean cross-entropy, accuracy) of the model on ``dataset`` (default: the test set).
        None if there is no test set, or if a stop was requested while evaluating."""
        dataset = self.test_set if dataset is None else dataset
        if dataset is None:
            return None
        was_training = self.model.training
        self.model.eval()
        n = len(dataset)
        loss_sum, correct = 0.0, 0
        try:
            for start in range(0, n, self.config.eval_batch_size):
                if self._stop_requested:
                    return None
                idx = torch.arange(start, min(start + self.config.eval_batch_size, n))
                x, y = self._batch(dataset, idx)
                with self._autocast():
                    logits = self.model(x)
                logits = logits.float()
                loss_sum += float(F.cross_entropy(logits, y, reduction="sum"))
                correct += int((logits.argmax(dim=1) == y).sum())
        finally:
            self.model.train(was_training)
        return loss_sum / n, correct / n

    # -- checkpoints --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly: tensors and plain Python values only."""
        np_state = np.random.get_state()
        model_config = getattr(self.model, "config", None)
        return {
            "format": 1,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": {
                "torch": torch.get_rng_state(),
                "data": self.data_generator.get_state(),
                "augment": self.augment_generator.get_state(),
                "python": random.getstate(),
                "numpy": {
                    "kind": str(np_state[0]),
                    "keys": torch.from_numpy(np_state[1].astype(np.int64)),
                    "pos": int(np_state[2]),
                    "has_gauss": int(np_state[3]),
                    "cached_gaussian": float(np_state[4]),
                },
            },
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "global_step": self.global_step,
            "permutation": self.permutation,
            "sums": dict(self.sums),
            "history": [dict(r) for r in self.history],
            "elapsed": self.elapsed(),
            "config": self.config.to_dict(),
            "model_config": model_config.to_dict() if hasattr(model_config, "to_dict") else None,
        }

    def load_state_dict(self, state: dict[str, Any], source: str = "checkpoint") -> None:
        """Restore a :meth:`state_dict`; refuses one from a run with other settings."""
        saved_cfg = state["config"]
        mine = self.config.to_dict()
        for name in _RESUME_FIELDS:
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
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        rng = state["rng"]
        torch.set_rng_state(rng["torch"])
        self.data_generator.set_state(rng["data"])
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
        self.epoch = int(state["epoch"])
        self.batch_in_epoch = int(state["batch_in_epoch"])
        self.global_step = int(state["global_step"])
        self.permutation = state["permutation"]
        self.sums = dict(state["sums"])
        self.history = [dict(r) for r in state["history"]]
        self._elapsed_base = float(state["elapsed"])
        self._t0 = time.perf_counter()

    def save(self) -> Path | None:
        """Write a checkpoint of the current step boundary (no-op without out_dir)."""
        if self.checkpoint_dir is None:
            return None
        return save_checkpoint(
            self.state_dict(),
            self.checkpoint_dir,
            epoch=self.epoch,
            batch_in_epoch=self.batch_in_epoch,
            global_step=self.global_step,
        )

    # -- the run ------------------------------------------------------------------------------
    def fit(self, resume: bool = False) -> TrainResult:
        """Train for ``config.epochs`` epochs (or up to ``max_steps``) and write the run files.

        resume: continue from ``out_dir/checkpoints`` (last.pt, or prev.pt if last.pt is bad);
        starts fresh if there is no checkpoint yet. Without it, an ``out_dir`` that already
        holds a checkpoint is refused rather than overwritten.

        Ctrl-C (SIGINT, in the main thread) stops at the end of the current step, writes a
        checkpoint, prints how to resume and raises KeyboardInterrupt. A second Ctrl-C aborts
        at once (the last checkpoint stays).
        """
        cfg = self.config
        self._start(resume)
        if self.out_dir is not None:
            self._logger = MetricsLogger(self.out_dir, self.history, tensorboard=cfg.tensorboard)
            self._write_run_files(final=False)
        kill = os.environ.get(KILL_ENV)
        self._kill_at = int(kill) if kill else None
        previous_handler = None
        if threading.current_thread() is threading.main_thread():
            previous_handler = signal.signal(signal.SIGINT, self._on_sigint)
        stopped = False
        try:
            while self.epoch < cfg.epochs:
                self._train_epoch()
                self._end_epoch()
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
            print(
                f"\ninterrupted at epoch {self.epoch + 1}, step {self.global_step}: "
                f"checkpoint saved{where}.\nresume with: {hint}",
                file=sys.stderr,
                flush=True,
            )
            raise KeyboardInterrupt
        if stopped:  # max_steps
            self.save()
            self._say(f"stopped after max_steps={cfg.max_steps} optimiser steps")
        return self._finish(stopped_early=stopped)

    def _start(self, resume: bool) -> None:
        cfg = self.config
        ckpt_dir = self.checkpoint_dir
        if resume and ckpt_dir is None:
            raise ValueError("resume=True needs an out_dir that holds the checkpoints")
        if resume:
            loaded = load_latest(ckpt_dir)
            if loaded is not None:
                state, path = loaded
                self.load_state_dict(state, source=str(path))
                self._say(
                    f"resumed from {path}: epoch {self.epoch + 1}/{cfg.epochs}, step "
                    f"{self.batch_in_epoch}/{self.steps_per_epoch} of the epoch, "
                    f"{self.global_step} optimiser steps done"
                )
                return
            self._say(f"no checkpoint in {ckpt_dir}; starting a new run")
        elif ckpt_dir is not None and find_checkpoint(ckpt_dir) is not None:
            raise ValueError(
                f"out_dir {self.out_dir} already holds a training checkpoint "
                f"({find_checkpoint(ckpt_dir)}); resume it (--resume / fit(resume=True)) or "
                "choose another output directory"
            )
        # A fresh run: seed every RNG the run may touch (dropout, drop-path, user code).
        torch.manual_seed(cfg.seed)
        random.seed(cfg.seed)
        np.random.seed(cfg.seed % 2**32)
        self._t0 = time.perf_counter()

    def _on_sigint(self, signum: int, frame: Any) -> None:
        if self._stop_requested:
            raise KeyboardInterrupt  # second Ctrl-C: abort now
        self._stop_requested = True
        print(
            "\nCtrl-C: stopping after this step and saving a checkpoint "
            "(Ctrl-C again to abort at once)",
            file=sys.stderr,
            flush=True,
        )

    def _check_stop(self) -> None:
        if self._stop_requested:
            raise _Stop
        if self.config.max_steps is not None and self.global_step >= self.config.max_steps:
            raise _Stop

    def _train_epoch(self) -> None:
        from tqdm import tqdm

        cfg = self.config
        n = len(self.train_set)
        if self.permutation is None:  # a new epoch: its data order, its running sums
            self.permutation = torch.randperm(n, generator=self.data_generator)
            self.batch_in_epoch = 0
            self.sums = self._zero_sums()
        bar = tqdm(
            total=self.steps_per_epoch,
            initial=self.batch_in_epoch,
            desc=f"epoch {self.epoch + 1}/{cfg.epochs}",
            disable=not self.show_progress,
            leave=False,
            dynamic_ncols=True,
        )
        try:
            while self.batch_in_epoch < self.steps_per_epoch:
                self._check_stop()
                t = time.perf_counter()
                start = self.batch_in_epoch * cfg.batch_size
                idx = self.permutation[start : start + cfg.batch_size]
                x, y = self._batch(self.train_set, idx)
                x = self._augmented(x)
                loss_sum, correct = self.train_step(x, y)
                self.batch_in_epoch += 1
                self.global_step += 1
                s = self.sums
                s["loss"] += loss_sum
                s["correct"] += correct
                s["seen"] += y.shape[0]
                s["train_seconds"] += time.perf_counter() - t
                if self.show_progress:
                    bar.update(1)
                    bar.set_postfix(
                        {
                            "loss": f"{s['loss'] / s['seen']:.4f}",
                            "acc": f"{100 * s['correct'] / s['seen']:.2f}%",
                            "img/s": f"{s['seen'] / max(s['train_seconds'], 1e-9):.0f}",
                        },
                        refresh=False,
                    )
                if cfg.save_every and self.global_step % cfg.save_every == 0:
                    self.save()
                if self._kill_at is not None and self.global_step == self._kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
        finally:
            bar.close()

    def _end_epoch(self) -> None:
        cfg = self.config
        result = self.evaluate()
        if self._stop_requested:
            raise _Stop  # evaluation was cut short; the resumed run evaluates again
        test_loss, test_acc = result if result is not None else (math.nan, math.nan)
        s = self.sums
        row = {
            "epoch": self.epoch + 1,
            "step": self.global_step,
            "train_loss": s["loss"] / max(s["seen"], 1),
            "train_acc": s["correct"] / max(s["seen"], 1),
            "test_loss": test_loss,
            "test_acc": test_acc,
            "lr": self.optimizer.param_groups[0]["lr"],
            "seconds": self.elapsed(),
            "images_per_s": s["seen"] / max(s["train_seconds"], 1e-9),
        }
        self.history.append(row)
        if self._logger is not None:
            self._logger.log_epoch(row)
        self.epoch += 1
        self.batch_in_epoch = 0
        self.permutation = None
        self.save()
        self._say(
            f"epoch {row['epoch']:>{len(str(cfg.epochs))}}/{cfg.epochs}  "
            f"train loss {row['train_loss']:.4f} acc {100 * row['train_acc']:6.2f}%  "
            f"test loss {test_loss:.4f} acc {100 * test_acc:6.2f}%  "
            f"lr {row['lr']:.2e}  {row['images_per_s']:.0f} img/s  {row['seconds']:.1f} s"
        )

    def _write_run_files(self, final: bool) -> None:
        assert self.out_dir is not None
        self.out_dir.mkdir(parents=True, exist_ok=True)
        args = {**self.run_args, "train_config": self.config.to_dict()}
        _write_json(self.out_dir / "train_args.json", args)
        info = preprocess_info(self.train_set)
        if info is not None:
            _write_json(self.out_dir / "preprocess.json", info)
        if final:
            if hasattr(self.model, "save_pretrained"):
                self.model.save_pretrained(self.out_dir)
            if self._logger is not None:
                self._logger.plot(title=self.run_args.get("title", ""))

    def _finish(self, stopped_early: bool) -> TrainResult:
        if self.history and self.batch_in_epoch == 0:
            final_loss, final_acc = self.history[-1]["test_loss"], self.history[-1]["test_acc"]
        else:  # stopped mid-epoch: evaluate the weights as they are
            result = self.evaluate()
            final_loss, final_acc = result if result is not None else (math.nan, math.nan)
        scored = [r for r in self.history if not math.isnan(r["test_acc"])]
        best = max(scored, key=lambda r: r["test_acc"]) if scored else None
        best_acc = best["test_acc"] if best else final_acc
        best_epoch = best["epoch"] if best else self.epoch
        if self.out_dir is not None:
            self._write_run_files(final=True)
        seconds = self.elapsed()
        if not math.isnan(final_acc):
            best_text = (
                f" (best {100 * best_acc:.2f}% at epoch {best_epoch})" if best is not None else ""
            )
            self._say(
                f"final test accuracy {100 * final_acc:.2f}%{best_text}; {self.epoch} epochs, "
                f"{self.global_step} steps in {seconds:.1f} s"
                + (f"; model and logs in {self.out_dir}" if self.out_dir else ""),
                always=True,
            )
        return TrainResult(
            final_test_acc=final_acc,
            final_test_loss=final_loss,
            best_test_acc=best_acc,
            best_epoch=best_epoch,
            epochs_completed=self.epoch,
            steps=self.global_step,
            seconds=seconds,
            stopped_early=stopped_early,
            history=[dict(r) for r in self.history],
            out_dir=self.out_dir,
        )


def _accepts(fn: Callable[..., Any], name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def train(
    model: nn.Module,
    train_set: Any,
    test_set: Any = None,
    out_dir: str | os.PathLike | None = None,
    augment: Augment | None = None,
    resume: bool = False,
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
    trainer = Trainer(model, train_set, test_set, TrainConfig(**config), out_dir, augment)
    return trainer.fit(resume=resume)
