"""A time budget plans the run: with ``max_minutes`` the schedule is fitted to the steps the
budget allows, measured from the run's first steps, and the final evaluation is sized to what
is left.

How. The first :data:`WARM_STEPS` optimiser steps compile and allocate; the next
:data:`MEASURE_STEPS` are timed (the wall clock between step ends, data loading included; a
step that follows an epoch's end is not timed, since the evaluation and checkpoint sit between
them). Then the per-epoch split is evaluated on :data:`EVAL_PROBE` examples to time evaluation
(inside ``torch.random.fork_rng``: the probe draws nothing from the run's random streams). From
these :func:`plan_steps` gives the last step the budget reaches, counting the full evaluation
and checkpoint of every epoch end on the way and keeping a reserve for the end
(:func:`reserve_seconds`: the final evaluation, at most :data:`FINAL_EVAL_SHARE` of the budget,
two saves and a margin). The schedule is fitted to that step: the warmup keeps the recipe's
proportion of the run (``warmup_steps * planned / recipe``), the cosine ends at the planned
step (inverse-sqrt: only the warmup changes). When the recipe's whole run fits, nothing
changes. The steps measured ran on the recipe's warmup ramp; the fitted one takes over at the
next step.

Ending inside the budget. The run stops at the planned step; should the steps slow down, it
stops anyway when only the reserve is left. The final evaluation then takes what is left: an
evenly spread subset of the split (at least :data:`MIN_EVAL` examples) when the whole does not
fit, said in the final line and in ``results.json`` (``budget``).

Re-planning. A machine's speed changes during a run (another job starts or ends). At each
epoch's end the plan is made again from the mean time of the later half of the steps since the
last plan (the speed the machine has now) and that epoch end's evaluation; when the reachable end moves by more than :data:`REPLAN_SHARE` of
the planned steps, the end moves (never past the recipe's) and the cosine is retargeted: from
this step its progress runs on from where it is to 1 at the new end, so the learning rate
does not jump. Each re-plan is kept in the plan's ``revisions`` and said in one line. Without
it a run that slowed down stopped with its cosine unfinished, and one that sped up left its
budget unused.

Resume. The plan is part of the checkpoint (``budget``) and so are the fitted schedule's
numbers (the scheduler's state); a resumed run follows the stored plan, so, where its steps
take the time they took before (no re-plan), its weights are bit-for-bit those of a run never
stopped. A checkpoint written before the plan holds none: that run plans when it resumes.
Without ``max_minutes`` none of this runs. Not with ``refit`` (its two phases keep
``max_minutes`` as a plain stop).

Tests replace :data:`clock` (a fake clock) to plan from chosen step times.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

__all__ = [
    "EVAL_PROBE",
    "FINAL_EVAL_SHARE",
    "MEASURE_STEPS",
    "MIN_EVAL",
    "REPLAN_SHARE",
    "WARM_STEPS",
    "BudgetPlan",
    "clock",
    "eval_size",
    "fitted_warmup",
    "now",
    "plan_steps",
    "reserve_seconds",
]

WARM_STEPS = 2  # first steps, not timed: compiling, allocating, filling caches
MEASURE_STEPS = 3  # timed steps the plan is made from
EVAL_PROBE = 64  # examples evaluated to time evaluation
FINAL_EVAL_SHARE = 0.15  # the most of the budget the final evaluation is planned to take
MIN_EVAL = 50  # a final evaluation never uses fewer examples (or the whole split if smaller)
REPLAN_SHARE = 0.02  # an epoch end's re-plan moves the end only by more than this share
MARGIN_SHARE = 0.03  # of the budget, kept for what is not measured (logs, files, jitter)
SAVE_BYTES_PER_S = 50e6  # a conservative write speed for a checkpoint's estimated cost

clock: Callable[[], float] = time.perf_counter


def now() -> float:
    """The run's clock in seconds (:data:`clock`; tests replace it)."""
    return clock()


@dataclasses.dataclass
class BudgetPlan:
    """A budget's plan, stored in the checkpoint. ``total_steps``: the step the run ends at;
    ``warmup_steps``: the fitted warmup; ``recipe_steps``/``recipe_warmup``: what the recipe
    asked; ``planned_at``: the step at which it was made; ``step_seconds``, ``eval_seconds``
    (per example), ``save_seconds``: what was measured or estimated; ``reserve_seconds``: kept
    for the end; ``fitted``: False when the recipe's whole run fits (schedule unchanged);
    ``revisions``: the re-plans at epoch ends (``ControlMixin._budget_replan``), oldest
    first."""

    minutes: float
    planned_at: int
    total_steps: int
    warmup_steps: int
    recipe_steps: int
    recipe_warmup: int
    step_seconds: float
    eval_seconds: float
    save_seconds: float
    reserve_seconds: float
    fitted: bool
    revisions: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BudgetPlan:
        # ``revisions`` came later: a checkpoint written before it has none.
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d})

    def describe(self, steps_per_epoch: int, schedule: str) -> str:
        """One line: ``budget 4 min -> 520 steps (1.9 epochs), warmup 52, cosine ...``."""
        epochs = self.total_steps / max(steps_per_epoch, 1)
        if not self.fitted:
            return (
                f"budget {self.minutes:g} min: the recipe's {self.recipe_steps} steps fit "
                f"(measured {self.step_seconds:.3g} s a step); schedule unchanged"
            )
        decay = f"cosine to step {self.total_steps}" if schedule == "cosine" else schedule
        return (
            f"budget {self.minutes:g} min -> {self.total_steps} steps ({epochs:.2g} epochs, "
            f"of the recipe's {self.recipe_steps}), warmup {self.warmup_steps}, {decay}; "
            f"measured {self.step_seconds:.3g} s a step, {self.reserve_seconds:.0f} s kept "
            "for the final evaluation and saving"
        )


def reserve_seconds(
    budget_s: float, final_eval_examples: int, eval_seconds: float, save_seconds: float
) -> float:
    """Seconds kept for the end: the final evaluation (whole, or at most
    :data:`FINAL_EVAL_SHARE` of the budget), two saves (the last checkpoint and the model) and
    a margin of :data:`MARGIN_SHARE` of the budget."""
    final_eval = min(final_eval_examples * eval_seconds, FINAL_EVAL_SHARE * budget_s)
    return final_eval + 2.0 * save_seconds + MARGIN_SHARE * budget_s


def plan_steps(
    *,
    left_s: float,
    done: int,
    step_s: float,
    steps_per_epoch: int,
    recipe_steps: int,
    epoch_end_s: float,
) -> int:
    """The last optimiser step the run can reach in ``left_s`` seconds of training from step
    ``done``: the largest t in [done, recipe_steps] whose cost (t - done) * step_s plus
    ``epoch_end_s`` for every epoch end in (done, t] fits; ``done`` if none does."""
    if step_s <= 0 or not math.isfinite(step_s):
        raise ValueError(f"step_s={step_s!r} is invalid: expected a finite float > 0")

    def cost(t: int) -> float:
        ends = t // steps_per_epoch - done // steps_per_epoch
        return (t - done) * step_s + ends * epoch_end_s

    lo, hi = done, max(recipe_steps, done)
    if cost(hi) <= left_s:
        return hi
    while hi - lo > 1:  # cost is increasing in t: the largest t that fits
        mid = (lo + hi) // 2
        if cost(mid) <= left_s:
            lo = mid
        else:
            hi = mid
    return lo


def fitted_warmup(recipe_warmup: int, recipe_steps: int, planned: int) -> int:
    """The recipe's warmup scaled to the planned run, keeping its share of the steps."""
    if planned >= recipe_steps:
        return recipe_warmup
    return min(round(recipe_warmup * planned / max(recipe_steps, 1)), planned)


def eval_size(n: int, left_s: float, eval_seconds: float) -> int:
    """How many of ``n`` examples an evaluation may use in ``left_s`` seconds at
    ``eval_seconds`` each: all that fit, at least :data:`MIN_EVAL` (or ``n`` if smaller)."""
    if eval_seconds <= 0:
        return n
    fits = math.floor(max(left_s, 0.0) / eval_seconds)
    return min(n, max(fits, MIN_EVAL))
