"""Run control: Ctrl-C, ``max_steps``, ``max_minutes`` (and its plan), divergence, and the kill
test hook.

A run stops only at a step boundary, and every process of a torchrun job stops at the same one:
the flags (loss finite, Ctrl-C asked, time up) travel in one small all-reduce per step
(:meth:`ControlMixin._check_finite`), and :meth:`ControlMixin._check_stop` raises
:class:`Stop` before the next step. The loop catches it, writes a checkpoint and says how to
resume (Ctrl-C) or finishes the run (``max_steps``, ``max_minutes``).

With ``max_minutes`` the budget also plans the run (:mod:`tfam.training.budget`): after the first
steps :meth:`ControlMixin._budget_step` fits the schedule to the steps the budget allows,
:meth:`ControlMixin._budget_replan` moves the end at an epoch's end when the steps' speed has
changed, the run stops at the planned step (or, should steps slow down within an epoch, when
only the reserve is left), and
:meth:`ControlMixin._final_metrics` sizes the final evaluation to the time left.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

import torch

import tfam.training.distributed as D
from tfam.training.budget import (
    EVAL_PROBE,
    MARGIN_SHARE,
    MEASURE_STEPS,
    REPLAN_SHARE,
    SAVE_BYTES_PER_S,
    WARM_STEPS,
    BudgetPlan,
    eval_size,
    fitted_warmup,
    now,
    plan_steps,
    reserve_seconds,
)
from tfam.training.checkpoint import find_checkpoint, read_checkpoint
from tfam.training.errors import NonFiniteLossError
from tfam.training.optim import InverseSqrt, WarmupCosine

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
    ``_elapsed_base``; and the budget's ``_budget_plan`` (in the checkpoint), the step times
    it measures and the sizes of the final evaluation (``_budget_evals``)."""

    _stop_requested = False
    _stop_agreed = False
    _time_up = False
    _elapsed_base = 0.0
    _t0 = 0.0
    _budget_plan: BudgetPlan | None = None
    _budget_last: float | None = None  # the clock at the last step's end (while measuring)

    def elapsed(self) -> float:
        """Seconds of this run so far, summed over resumes (:func:`tfam.training.budget.now`)."""
        return self._elapsed_base + now() - self._t0

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
        plan = self._budget_plan
        if plan is not None and plan.fitted and self.global_step >= plan.total_steps:
            raise Stop
        if self._time_up:
            raise Stop

    def _check_finite(self, local_loss: float) -> None:
        """Every rank agrees on whether the step's loss is finite (one small all-reduce), so a
        divergence stops all of them at the same step."""
        limit = self.config.max_minutes
        # With a plan, time is up when only the reserve for the end is left.
        reserve = self._budget_plan.reserve_seconds if self._budget_plan is not None else 0.0
        time_up = limit is not None and self.elapsed() >= 60.0 * limit - reserve
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
        plan = self._budget_plan
        if self._time_up:
            self._say(
                f"stopped after max_minutes={self.config.max_minutes:g} at step {self.global_step}"
                + (f" (planned: {plan.total_steps}; the steps slowed down)" if plan else "")
            )
        elif plan is not None and plan.fitted and self.global_step >= plan.total_steps:
            self._say(
                f"stopped at step {self.global_step} as planned for the budget of "
                f"{plan.minutes:g} min"
            )
        else:
            self._say(f"stopped after max_steps={self.config.max_steps} optimiser steps")

    # -- the budget's plan (tfam.training.budget) --------------------------------------------
    def _budget_step(self) -> None:
        """After every optimiser step with ``max_minutes``: time the step. With no plan yet,
        plan after :data:`~tfam.training.budget.MEASURE_STEPS` timed steps; afterwards the times
        wait for the next epoch end's re-plan (:meth:`_budget_replan`)."""
        cfg = self.config
        if cfg.max_minutes is None or cfg.refit or self.phase != 1:
            return
        t = now()
        last, self._budget_last = self._budget_last, t
        # Not timed: the first steps (compiling, allocating), the first after a resume, and
        # one that follows an epoch's end (its evaluation and checkpoint sit in between).
        if last is None or self.batch_in_epoch == 1 or self.global_step <= WARM_STEPS:
            return
        if self._budget_plan is not None:  # timed for the re-plan at the epoch's end
            self.__dict__.setdefault("_budget_since", []).append(t - last)
            return
        times = self.__dict__.setdefault("_budget_times", [])
        times.append(t - last)
        if len(times) >= MEASURE_STEPS:
            self._make_budget_plan(sum(times) / len(times))
            self._budget_last = now()  # the evaluation probe is not the next step's time

    def _budget_replan(self, epoch_end_s: float) -> str | None:
        """At an epoch's end (before its checkpoint): plan again from the steps timed since the
        last plan (the mean of the later half) and this epoch end's evaluation (``epoch_end_s``
        seconds). The end moves only when it moves by more than
        :data:`~tfam.training.budget.REPLAN_SHARE` of the planned steps; the cosine then ends
        at the new step without a jump in the learning rate
        (:meth:`~tfam.training.optim.WarmupCosine.retarget`). Returns the line that says so,
        or None."""
        plan, cfg = self._budget_plan, self.config
        if plan is None or cfg.max_minutes is None or cfg.refit or self.phase != 1:
            return None
        since = self.__dict__.get("_budget_since", [])
        if len(since) < 2 * MEASURE_STEPS:
            return None  # short epochs: the times add up until there are enough
        self._budget_since = []
        # The later half: the speed the machine has now, should it have changed mid-epoch.
        recent = since[len(since) // 2 :]
        step_s = sum(recent) / len(recent)
        per_epoch = self._per_epoch_set()
        n_per_epoch = len(per_epoch) if per_epoch is not None else 0
        eval_s = epoch_end_s / n_per_epoch if n_per_epoch else plan.eval_seconds
        # This epoch end's checkpoint is still to be written.
        total, reserve = self._reachable_end(
            step_s, eval_s, plan.save_seconds, epoch_end_s, pending_s=plan.save_seconds
        )
        # Every process follows rank 0's numbers (their clocks differ).
        total, step_s, reserve = D.broadcast_object((total, step_s, reserve), self.dist)
        if abs(total - plan.total_steps) <= max(2, REPLAN_SHARE * plan.total_steps):
            return None
        was = plan.total_steps
        plan.revisions.append(
            {"at": self.global_step, "step_seconds": step_s, "total_steps": total, "was": was}
        )
        plan.total_steps, plan.reserve_seconds = total, reserve
        plan.fitted = total < plan.recipe_steps
        step = self.scheduler.last_epoch
        for factor in self.scheduler.lr_lambdas:
            if isinstance(factor, WarmupCosine):
                factor.retarget(step, total)
        self._set_scheduled_lr()
        ends = f"cosine to step {total}" if cfg.schedule == "cosine" else f"stop at step {total}"
        return (
            f"budget: steps now take {step_s:.3g} s (planned {plan.step_seconds:.3g} s); "
            f"re-planned at step {self.global_step}: {ends} (was {was}, of the recipe's "
            f"{plan.recipe_steps})"
        )

    def _reachable_end(
        self, step_s: float, eval_s: float, save_s: float, epoch_eval_s: float,
        pending_s: float = 0.0,
    ) -> tuple[int, float]:  # fmt: skip
        """The last step the budget reaches from now, at ``step_s`` a step, ``eval_s`` an
        evaluated example, ``save_s`` a checkpoint and ``epoch_eval_s`` an epoch end's
        evaluation (``pending_s``: still to spend before the next step), and the reserve kept
        for the end."""
        budget_s = 60.0 * float(self.config.max_minutes)
        per_epoch = self._per_epoch_set()
        n_per_epoch = len(per_epoch) if per_epoch is not None else 0
        # The end evaluates the per-epoch split (when it stops mid-epoch) and, with a
        # validation split, the test split too.
        n_test = len(self.test_set) if self.val_set is not None and self.test_set else 0
        reserve = reserve_seconds(budget_s, n_per_epoch + n_test, eval_s, save_s)
        total = plan_steps(
            left_s=budget_s - self.elapsed() - pending_s - reserve,
            done=self.global_step,
            step_s=step_s,
            steps_per_epoch=self.steps_per_epoch,
            recipe_steps=self.total_steps,
            epoch_end_s=epoch_eval_s + save_s,
        )
        return total, reserve

    def _set_scheduled_lr(self) -> None:
        """The next step's learning rate from the schedule's factors (after they changed)."""
        step = self.scheduler.last_epoch
        for group, base, factor in zip(
            self.optimizer.param_groups, self.scheduler.base_lrs, self.scheduler.lr_lambdas
        ):
            group["lr"] = base * factor(step)
        self.scheduler._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def _per_epoch_set(self) -> Any:
        return self.val_set if self.val_set is not None else self.test_set

    def _time_eval(self, dataset: Any) -> float:
        """Seconds per example of evaluating ``dataset``, timed on a few of its examples; the
        probe draws nothing from the run's random streams (a DataLoader would)."""
        if dataset is None or len(dataset) == 0:
            return 0.0
        n = min(len(dataset), EVAL_PROBE, self.config.eval_batch_size)
        with torch.random.fork_rng(devices=[]):
            t = now()
            self.evaluate_metrics(dataset, limit=n)
            return (now() - t) / n

    def _save_estimate(self) -> float:
        """Seconds one checkpoint takes, estimated from its size (weights and AdamW's two
        moments) at a conservative write speed; 0 without out_dir."""
        if self.out_dir is None:
            return 0.0
        size = sum(p.numel() * p.element_size() for p in self.model.parameters())
        return 3.0 * size / SAVE_BYTES_PER_S

    def _make_budget_plan(self, step_s: float) -> None:
        cfg = self.config
        per_epoch = self._per_epoch_set()
        eval_s = self._time_eval(per_epoch)
        save_s = self._save_estimate()
        n_per_epoch = len(per_epoch) if per_epoch is not None else 0
        total, reserve = self._reachable_end(step_s, eval_s, save_s, n_per_epoch * eval_s)
        plan = BudgetPlan(
            minutes=float(cfg.max_minutes),
            planned_at=self.global_step,
            total_steps=total,
            warmup_steps=fitted_warmup(self.warmup_steps, self.total_steps, total),
            recipe_steps=self.total_steps,
            recipe_warmup=self.warmup_steps,
            step_seconds=step_s,
            eval_seconds=eval_s,
            save_seconds=save_s,
            reserve_seconds=reserve,
            fitted=total < self.total_steps,
        )
        # Every process follows rank 0's plan (their clocks differ).
        plan = BudgetPlan.from_dict(D.broadcast_object(plan.to_dict(), self.dist))
        self._apply_budget(plan)
        self._say(plan.describe(self.steps_per_epoch, cfg.schedule))

    def _apply_budget(self, plan: BudgetPlan) -> None:
        """Follow ``plan``: its warmup and end in the schedule's factors (which the scheduler's
        state, and so the checkpoint, holds), and the learning rate of the next step from them
        when they changed."""
        self._budget_plan = plan
        if not plan.fitted:
            return
        changed = False
        for factor in self.scheduler.lr_lambdas:
            numbers = {"warmup_steps": plan.warmup_steps}
            if isinstance(factor, WarmupCosine):
                numbers["total_steps"] = plan.total_steps
            elif not isinstance(factor, InverseSqrt):
                continue
            for name, value in numbers.items():
                changed |= getattr(factor, name) != value
                setattr(factor, name, value)
        if changed:
            self._set_scheduled_lr()

    def _budget_state(self) -> dict[str, Any] | None:
        """The checkpoint's ``budget`` entry: the plan, or None."""
        return self._budget_plan.to_dict() if self._budget_plan is not None else None

    def _load_budget(self, saved: dict[str, Any] | None) -> None:
        """Follow the checkpoint's plan (a resumed run measures nothing)."""
        self._budget_last = None
        if saved is not None:
            self._apply_budget(BudgetPlan.from_dict(saved))

    def _final_metrics(self, dataset: Any = None, share: float = 1.0) -> dict[str, float] | None:
        """The final evaluation of ``dataset`` (default: the per-epoch split). With a budget
        plan and ``max_minutes``, on as many examples as the time left allows (``share`` of
        it; an evenly spread subset, recorded in ``_budget_evals``); otherwise on all."""
        data = dataset if dataset is not None else self._per_epoch_set()
        plan, cfg = self._budget_plan, self.config
        if data is None or plan is None or cfg.max_minutes is None or self.phase != 1:
            return self.evaluate_metrics(dataset)
        budget_s = 60.0 * cfg.max_minutes
        left = budget_s - self.elapsed() - plan.save_seconds - MARGIN_SHARE * budget_s
        n = len(data)
        size = int(D.broadcast_object(eval_size(n, left * share, plan.eval_seconds), self.dist))
        if size < n:
            split = "test" if data is self.test_set else "val"
            self.__dict__.setdefault("_budget_evals", []).append(
                {"split": split, "examples": size, "of": n}
            )
        return self.evaluate_metrics(data, limit=size)

    def _budget_record(self) -> dict[str, Any]:
        """``results.json``'s ``budget``: the plan and what the final evaluation used
        (empty without a plan)."""
        if self._budget_plan is None:
            return {}
        return {"plan": self._budget_plan.to_dict(), "final_eval": self._budget_note_parts()}

    def _budget_note_parts(self) -> list[dict[str, Any]]:
        return list(self.__dict__.get("_budget_evals", []))

    def _budget_note(self) -> str:
        """The final line's note on a sized-down evaluation ('' when it used whole splits)."""
        parts = [
            f"{e['split']} on {e['examples']} of {e['of']} examples"
            for e in self._budget_note_parts()
        ]
        return f"; {', '.join(parts)}: the budget" if parts else ""
