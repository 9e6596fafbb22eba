"""Run control: Ctrl-C, ``max_steps``, ``max_minutes``, divergence, and the kill test hook.

A run stops only at a step boundary, and every process of a torchrun job stops at the same one:
the flags (loss finite, Ctrl-C asked, time up) travel in one small all-reduce per step
(:meth:`ControlMixin._check_finite`), and :meth:`ControlMixin._check_stop` raises
:class:`Stop` before the next step. The loop catches it, writes a checkpoint and says how to
resume (Ctrl-C) or finishes the run (``max_steps``, ``max_minutes``).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import torch

import tfam.training.distributed as D
from tfam.training.checkpoint import find_checkpoint, read_checkpoint
from tfam.training.errors import NonFiniteLossError

__all__ = ["KILL_ENV", "KILL_RANK_ENV", "ControlMixin", "Stop", "kill_step"]

# Test hook: with TFAM_TEST_KILL_AT_STEP=k the process SIGKILLs itself right after optimiser
# step k (after any checkpoint due at that step), to prove that kill + resume is exact. With
# TFAM_TEST_KILL_RANK=r only rank r does (a dead rank in a torchrun job).
KILL_ENV = "TFAM_TEST_KILL_AT_STEP"
KILL_RANK_ENV = "TFAM_TEST_KILL_RANK"


class Stop(Exception):
    """Internal: leave the loops at a step boundary (Ctrl-C, max_steps or max_minutes)."""


def kill_step(rank: int) -> int | None:
    """The optimiser step after which this process kills itself (the test hook), or None."""
    kill = os.environ.get(KILL_ENV)
    kill_rank = os.environ.get(KILL_RANK_ENV)
    return int(kill) if kill and (not kill_rank or int(kill_rank) == rank) else None


class ControlMixin:
    """The :class:`~tfam.training.Trainer`'s stop logic. Reads ``config`` (max_steps,
    max_minutes), ``dist``, ``device``, ``phase``, ``epoch``, ``global_step``, ``optimizer``,
    ``checkpoint_dir``; owns ``_stop_requested``, ``_stop_agreed``, ``_time_up``, ``_t0`` and
    ``_elapsed_base``."""

    _stop_requested = False
    _stop_agreed = False
    _time_up = False
    _elapsed_base = 0.0
    _t0 = 0.0

    def elapsed(self) -> float:
        """Seconds of this run so far, summed over resumes."""
        return self._elapsed_base + time.perf_counter() - self._t0

    @property
    def _reduce_device(self) -> torch.device:
        # NCCL reduces CUDA tensors only; gloo reduces CPU tensors.
        return self.device if self.device.type == "cuda" else torch.device("cpu")

    @contextlib.contextmanager
    def _sigint_handler(self) -> Iterator[None]:
        """Ctrl-C asks for a stop at the next step boundary while inside (main thread only)."""
        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGINT, self._on_sigint)
        try:
            yield
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)

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

    def _interrupted(self) -> None:
        """After Ctrl-C: write a checkpoint, say how to resume, raise KeyboardInterrupt."""
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

    def _check_stop(self) -> None:
        # Distributed: the stop flag travels with each step's all-reduce, so every rank stops
        # at the same step boundary.
        requested = self._stop_agreed if self.dist.enabled else self._stop_requested
        if requested:
            self._stop_requested = True
            raise Stop
        if self.phase == 2:
            return  # the refit's length is its plan's; max_steps and max_minutes bound selection
        if self.config.max_steps is not None and self.global_step >= self.config.max_steps:
            raise Stop
        if self._time_up:
            raise Stop

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

    def _say_limit(self) -> None:
        if self._time_up:
            self._say(
                f"stopped after max_minutes={self.config.max_minutes:g} at step {self.global_step}"
            )
        else:
            self._say(f"stopped after max_steps={self.config.max_steps} optimiser steps")
