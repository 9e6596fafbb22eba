"""The run's state: what a checkpoint holds, and starting or resuming a run from it.

What "exact" means. Every random draw of a run comes from state that the checkpoint holds: the
data order of an epoch is ``torch.randperm`` with the trainer's data generator, the
augmentation draws from the trainer's augmentation generator, dropout and drop-path from the
global torch RNG (and the CUDA RNG on a GPU); Python's and NumPy's RNGs are saved too, for every
rank. A checkpoint is taken between two optimiser steps and stores the model, the optimiser,
scheduler and gradient scaler, all those RNG states, the epoch, the step within the epoch, the
epoch's permutation (and token-batch boundaries) and running sums. The format (``format: 2``)
is read by :func:`tfam.training.checkpoint.read_checkpoint`; format-1 checkpoints and those
from before a config field existed still load.

Extending a run. ``fit(resume=True)`` with a larger ``epochs`` than the run was started with
continues it: the cosine schedule is re-planned to end at the new last step, from the current
step on (the learning rate steps up where the old plan had already decayed). A resumed run that
has nothing left to do says it is finished.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

import tfam.training.distributed as D
import tfam.training.sharding as sharding
from tfam.training.batching import count_token_batches, dataset_lengths
from tfam.training.budget import now
from tfam.training.checkpoint import find_checkpoint, load_latest, read_checkpoint, save_checkpoint
from tfam.training.config import RESUME_FIELDS
from tfam.training.devices import grad_scaler
from tfam.training.errors import CheckpointSaveError
from tfam.training.optim import WarmupCosine, build_optimizer, build_scheduler
from tfam.training.refit import RefitPlan
from tfam.training.runlock import RunLock

__all__ = ["CHECKPOINT_DIR", "RunStateMixin"]

CHECKPOINT_DIR = "checkpoints"


class RunStateMixin:
    """The :class:`~tfam.training.Trainer`'s checkpoint state: :meth:`state_dict`,
    :meth:`load_state_dict`, :meth:`save`, and the start of :meth:`fit` (a fresh run or a
    resumed one). Reads and writes the trainer's position (``epoch``, ``batch_in_epoch``,
    ``global_step``, ``permutation``, ``batch_offsets``, ``sums``, ``history``, ``phase``,
    ``refit_plan``, ...), its optimiser, scheduler, scaler and generators."""

    @property
    def checkpoint_dir(self) -> Path | None:
        return self.out_dir / CHECKPOINT_DIR if self.out_dir is not None else None

    @staticmethod
    def _zero_sums() -> dict[str, float]:
        return {"seen": 0.0, "train_seconds": 0.0}

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

    # -- state --------------------------------------------------------------------------------
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

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly: tensors and plain Python values only.
        Distributed: a collective (every rank must call it); rank 0's copy is complete."""
        model_config = getattr(self.model, "config", None)
        mine = self._rank_state()
        ranks = D.all_gather_object(mine, self.dist)
        weights, optimizer = sharding.full_state(self.model, self.optimizer, self._sharded)
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
            "budget": self._budget_state(),  # a max_minutes plan (tfam.training.budget)
            # Refit: the phase, the refit's plan (phase 2), the initial weights (phase 1).
            "phase": self.phase,
            "refit": self.refit_plan.to_dict() if self.refit_plan is not None else None,
            "refit_init": self._initial_weights if self.phase == 1 else None,
            # Which epoch's weights are kept as the best (tfam.training.best), and where.
            "best": self._best_state(),
            # The weight average (tfam.training.ema), with ema.
            "ema": self.ema.state_dict() if self.ema is not None else None,
            "config": self.config.to_dict(),
            "model_config": model_config.to_dict() if hasattr(model_config, "to_dict") else None,
        }

    def _check_same_run(self, state: dict[str, Any], source: str) -> int:
        """Refuse a checkpoint from a run with other settings or another model; returns the
        epochs it was started with."""
        saved_cfg = dict(state["config"])
        saved_cfg.setdefault("precision", "bf16" if saved_cfg.get("bf16") else "fp32")
        # Checkpoints from before these fields existed ran with their defaults.
        saved_cfg.setdefault("warmup_steps", None)
        saved_cfg.setdefault("schedule", "cosine")
        saved_cfg.setdefault("batch_tokens", None)
        saved_cfg.setdefault("refit", False)
        saved_cfg.setdefault("ema", None)
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
        return int(saved_cfg.get("epochs", self.config.epochs))

    def load_state_dict(self, state: dict[str, Any], source: str = "checkpoint") -> None:
        """Restore a :meth:`state_dict`; refuses one from a run with other settings."""
        saved_epochs = self._check_same_run(state, source)
        if int(state.get("phase", 1)) == 2:
            self._resume_refit(RefitPlan.from_dict(state["refit"]), saved_epochs, source)
        elif state.get("refit_init") is not None:
            self._initial_weights = state["refit_init"]
        sharding.load_full_state(
            self.model, self.optimizer, state["model"], state["optimizer"], self._sharded
        )
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
        self._load_best_state(state)
        if self.ema is not None:
            self.ema.load_state_dict(state["ema"])
        self._elapsed_base = float(state["elapsed"])
        self._t0 = now()
        if saved_epochs != self.config.epochs:
            self._replan(saved_epochs)
        self._load_budget(state.get("budget"))  # after _replan: the stored plan wins

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

    # -- writing ------------------------------------------------------------------------------
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
            else:
                self._drop_stale_best()
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

    # -- the start of a run -------------------------------------------------------------------
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
        self._t0 = now()
        return True

    def _seed_streams(self) -> None:
        """Seed every RNG a fresh run may touch (dropout, drop-path, user code); each process
        has its own stream, rank 0 the single-process one."""
        seed = self.config.seed + 104_729 * self.dist.rank
        torch.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed % 2**32)
