"""The time budget's plan (tfam.training.budget): steps from measured step times, the schedule
fitted to them, the run ending inside the budget with a final evaluation sized to what is left,
and a resumed run following the stored plan. Time is a fake clock that the data advances."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import tfam
import tfam.training.budget as budget
from tfam.training import TrainConfig, Trainer
from tfam.training.budget import (
    MIN_EVAL,
    BudgetPlan,
    eval_size,
    fitted_warmup,
    plan_steps,
    reserve_seconds,
)
from tfam.training.optim import WarmupCosine


class FakeClock:
    """Seconds that pass only when the data says so."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Timed:
    """Seeded 1x8x8 images; reading a batch costs ``per_batch`` + ``per_example`` * size fake
    seconds (a training step, an evaluation batch)."""

    def __init__(self, clock: FakeClock, n: int, seed: int, per_batch=0.0, per_example=0.0):
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 4, (n,), generator=g)
        self.images = torch.randn(n, 1, 8, 8, generator=g) + self.labels.view(-1, 1, 1, 1) * 0.5
        self.clock, self.per_batch, self.per_example = clock, per_batch, per_example
        self.read = 0  # examples read

    def __len__(self) -> int:
        return len(self.labels)

    def get_batch(self, idx: torch.Tensor):
        self.clock.t += self.per_batch + self.per_example * len(idx)
        self.read += len(idx)
        return self.images[idx], self.labels[idx]


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(budget, "clock", fake)
    return fake


def tiny() -> torch.nn.Module:
    torch.manual_seed(0)
    return tfam.create_model(
        "vit", image_size=8, patch_size=4, in_channels=1, num_classes=4, dim=16, depth=1, heads=2
    )


def config(**kw) -> TrainConfig:
    settings = dict(epochs=50, batch_size=10, lr=3e-3, warmup_steps=100, quiet=True, progress=False)
    settings.update(device="cpu", **kw)
    return TrainConfig(**settings)


def splits(clock: FakeClock, step_s=1.0, eval_s=0.01, test_n=60):
    train = Timed(clock, 200, 0, per_batch=step_s)  # 20 steps an epoch
    val = Timed(clock, 80, 1, per_example=eval_s)
    test = Timed(clock, test_n, 2, per_example=eval_s)
    return train, val, test


# -- the planner's arithmetic -------------------------------------------------------------------
def test_plan_steps_counts_steps_and_epoch_ends() -> None:
    # 50 s from step 5 at 1 s a step: 50 steps, less what two epoch ends (steps 20, 40) cost.
    kw = dict(done=5, step_s=1.0, steps_per_epoch=20, recipe_steps=1000)
    assert plan_steps(left_s=50.0, epoch_end_s=0.0, **kw) == 55
    assert plan_steps(left_s=50.0, epoch_end_s=1.0, **kw) == 53  # 48 steps + 2 ends
    assert plan_steps(left_s=1e9, epoch_end_s=1.0, **kw) == 1000  # the recipe fits: its length
    assert plan_steps(left_s=-3.0, epoch_end_s=0.0, **kw) == 5  # nothing fits: stop now
    with pytest.raises(ValueError, match=r"step_s=0 is invalid"):
        plan_steps(left_s=1.0, epoch_end_s=0.0, **{**kw, "step_s": 0})


def test_warmup_keeps_its_share_and_eval_is_sized_to_the_time_left() -> None:
    assert fitted_warmup(80, 793, 400) == round(80 * 400 / 793)
    assert fitted_warmup(80, 793, 900) == 80  # the whole recipe fits: unchanged
    assert eval_size(3016, left_s=40.0, eval_seconds=0.1) == 400
    assert eval_size(3016, left_s=1e6, eval_seconds=0.1) == 3016
    assert eval_size(3016, left_s=-5.0, eval_seconds=0.1) == MIN_EVAL  # a floor
    assert eval_size(20, left_s=0.0, eval_seconds=0.1) == 20
    # The final evaluation is reserved whole when cheap, else at most 15% of the budget.
    assert reserve_seconds(100.0, 10, 0.1, 0.0) == pytest.approx(1.0 + 3.0)
    assert reserve_seconds(100.0, 10_000, 0.1, 2.0) == pytest.approx(15.0 + 4.0 + 3.0)


# -- a run under a budget -----------------------------------------------------------------------
def test_budget_plans_the_schedule_and_the_run_ends_inside_it(clock, tmp_path: Path) -> None:
    train, val, test = splits(clock)
    trainer = Trainer(tiny(), train, test, config(max_minutes=1.0), tmp_path / "r", val_set=val)
    result = trainer.fit()
    plan = trainer._budget_plan
    assert plan is not None and plan.fitted and plan.planned_at == 5
    assert plan.step_seconds == pytest.approx(1.0) and plan.eval_seconds == pytest.approx(0.01)
    # 60 s: 5 s measured, 0.64 s probing evaluation, a reserve, epoch ends of 0.8 s each.
    assert 45 <= plan.total_steps <= 55
    assert result.steps == plan.total_steps
    assert plan.warmup_steps == round(100 * plan.total_steps / 1000)
    factor = trainer.scheduler.lr_lambdas[0]
    assert isinstance(factor, WarmupCosine) and factor.total_steps == plan.total_steps
    # The cosine reached its end at the planned step: min_lr.
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(trainer.config.min_lr)
    assert result.seconds <= 60.0, "the run, final evaluation included, ends inside the budget"
    record = json.loads((tmp_path / "r" / "results.json").read_text())
    assert record["budget"]["plan"]["total_steps"] == plan.total_steps
    assert record["budget"]["final_eval"] == []  # the splits were small: evaluated whole
    assert read_checkpoint_budget(tmp_path / "r") == plan.to_dict()


def read_checkpoint_budget(out: Path) -> dict:
    from tfam.training import read_checkpoint

    return read_checkpoint(out / "checkpoints" / "last.pt")["budget"]


def test_final_evaluation_is_sized_down_when_little_time_is_left(clock, tmp_path: Path, capsys):
    # 2,000 test examples at 0.05 s: 100 s, more than the whole budget.
    train, val, test = splits(clock, eval_s=0.05, test_n=2000)
    cfg = config(max_minutes=1.0, quiet=False)
    result = Trainer(tiny(), train, test, cfg, tmp_path / "r", val_set=val).fit()
    record = json.loads((tmp_path / "r" / "results.json").read_text())
    # The run stopped mid-epoch: validation and test both evaluated on what time allows.
    val_used, used = record["budget"]["final_eval"]
    assert val_used == {"split": "val", "examples": MIN_EVAL, "of": 80}
    assert used["split"] == "test" and used["of"] == 2000 and MIN_EVAL <= used["examples"] < 400
    assert result.seconds <= 60.0
    out = capsys.readouterr().out
    assert "budget 1 min -> " in out and "warmup" in out
    assert f"test on {used['examples']} of 2000 examples: the budget" in out


def test_a_budget_the_recipe_fits_changes_nothing(clock, tmp_path: Path) -> None:
    train, val, test = splits(clock)
    cfg = config(epochs=2, warmup_steps=10, max_minutes=10.0)
    trainer = Trainer(tiny(), train, test, cfg, val_set=val)
    result = trainer.fit()
    plan = trainer._budget_plan
    assert plan is not None and not plan.fitted and result.steps == 40
    factor = trainer.scheduler.lr_lambdas[0]
    assert (factor.warmup_steps, factor.total_steps) == (10, 40)

    # ... and the weights are those of the same run without a budget (the probe draws nothing).
    train, val, test = splits(clock)
    plain = Trainer(tiny(), train, test, config(epochs=2, warmup_steps=10), val_set=val)
    plain.fit()
    for a, b in zip(trainer.model.parameters(), plain.model.parameters()):
        assert torch.equal(a, b)


def test_without_max_minutes_nothing_is_measured(clock, tmp_path: Path) -> None:
    train, val, test = splits(clock)
    trainer = Trainer(
        tiny(), train, test, config(epochs=1, warmup_steps=5), tmp_path / "r", val_set=val
    )
    trainer.fit()
    assert trainer._budget_plan is None
    assert val.read == 80 and test.read == 60, "each split read once, no probe"
    assert "budget" not in json.loads((tmp_path / "r" / "results.json").read_text())
    assert read_checkpoint_budget(tmp_path / "r") is None


def test_a_resumed_run_follows_the_stored_plan(clock, tmp_path: Path) -> None:
    train, val, test = splits(clock)
    whole = Trainer(tiny(), train, test, config(max_minutes=1.0), tmp_path / "a", val_set=val)
    whole.fit()
    plan = whole._budget_plan
    assert plan is not None and plan.fitted

    # The same run, stopped at step 30 (after its plan) and resumed on a machine twice as slow:
    # it measures nothing, follows the stored plan and ends with the same weights.
    clock.t = 1000.0
    train, val, test = splits(clock)
    cfg = config(max_minutes=1.0, max_steps=30)
    Trainer(tiny(), train, test, cfg, tmp_path / "b", val_set=val).fit()
    train, val, test = splits(clock, step_s=2.0)
    again = Trainer(tiny(), train, test, config(), tmp_path / "b", val_set=val)
    result = again.fit(resume=True)
    assert again._budget_plan == plan
    assert result.steps == plan.total_steps
    for a, b in zip(whole.model.parameters(), again.model.parameters()):
        assert torch.equal(a, b)


class Changing(Timed):
    """Training data whose steps take ``per_batch`` fake seconds until ``after`` batches have
    been read, then ``then`` seconds (another job started, or ended, on the machine)."""

    def __init__(self, clock: FakeClock, n: int, seed: int, per_batch: float, after: int,
                 then: float) -> None:  # fmt: skip
        super().__init__(clock, n, seed, per_batch=per_batch)
        self.after, self.then, self.batches = after, then, 0

    def get_batch(self, idx: torch.Tensor):
        self.batches += 1
        if self.batches > self.after:
            self.per_batch = self.then
        return super().get_batch(idx)


@pytest.mark.parametrize("then", [2.0, 0.5])
def test_the_plan_moves_at_an_epoch_end_when_the_steps_change_speed(
    clock, tmp_path: Path, capsys, then: float
) -> None:
    # Planned at 1 s a step; from the 12th batch on each takes `then` seconds.
    _, val, test = splits(clock)
    train = Changing(clock, 200, 0, per_batch=1.0, after=12, then=then)
    cfg = config(max_minutes=1.0, quiet=False)
    trainer = Trainer(tiny(), train, test, cfg, tmp_path / "r", val_set=val)
    result = trainer.fit()
    plan = trainer._budget_plan
    assert plan is not None and plan.revisions, "re-planned"
    first = plan.revisions[0]
    assert first["at"] == 20  # the first epoch's end
    assert (first["step_seconds"] > 1.0) if then > 1 else (first["step_seconds"] < 1.0)
    planned = first["was"]
    # Slower: the end comes earlier; faster: later. The run stops at the (last) new end ...
    assert (plan.total_steps < planned) if then > 1 else (plan.total_steps > planned)
    assert result.steps == plan.total_steps
    # ... with its cosine finished there (a slowed run used to stop by the clock, mid-cosine).
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(trainer.config.min_lr)
    assert result.seconds <= 60.0
    out = capsys.readouterr().out
    assert f"re-planned at step 20: cosine to step {first['total_steps']} (was {planned}" in out
    record = json.loads((tmp_path / "r" / "results.json").read_text())
    assert record["budget"]["plan"]["revisions"] == plan.revisions
    assert read_checkpoint_budget(tmp_path / "r") == plan.to_dict()


def test_short_epochs_add_their_step_times_up_until_a_re_plan_can_use_them(
    clock, tmp_path: Path
) -> None:
    # 4 steps an epoch: at most 3 timed steps each, fewer than a re-plan needs. The times add
    # up across epoch ends, so the slowdown from the 8th batch is still seen.
    _, val, test = splits(clock)
    train = Changing(clock, 40, 0, per_batch=1.0, after=8, then=2.0)
    trainer = Trainer(tiny(), train, test, config(max_minutes=1.0), val_set=val)
    result = trainer.fit()
    plan = trainer._budget_plan
    assert plan is not None and plan.revisions, "re-planned despite epochs of 4 steps"
    assert all(r["at"] % 4 == 0 for r in plan.revisions)  # only at epoch ends
    assert plan.revisions[0]["total_steps"] < plan.revisions[0]["was"]
    assert result.steps == plan.total_steps and result.seconds <= 60.0


def test_a_plan_from_before_revisions_loads() -> None:
    plan = BudgetPlan(4.0, 5, 520, 52, 793, 80, 0.4, 0.01, 1.0, 20.0, True)
    saved = plan.to_dict()
    del saved["revisions"]
    assert BudgetPlan.from_dict(saved) == plan


def test_plan_round_trips_through_a_dict() -> None:
    plan = BudgetPlan(4.0, 5, 520, 52, 793, 80, 0.4, 0.01, 1.0, 20.0, True)
    assert BudgetPlan.from_dict(plan.to_dict()) == plan
    line = plan.describe(steps_per_epoch=265, schedule="cosine")
    assert line.startswith("budget 4 min -> 520 steps (2 epochs, of the recipe's 793)")
    assert "warmup 52" in line


def test_the_command_line_says_the_plan_and_ends_inside_the_budget(monkeypatch, tmp_path, capsys):
    import tfam.cli

    ticks = iter(range(10**6))
    monkeypatch.setattr(budget, "clock", lambda: float(next(ticks)))  # 1 s a reading
    out = tmp_path / "run"
    argv = ["train", "vit", "--data", "digits", "--out", out, "--set", "dim=16", "--set"]
    argv += ["depth=1", "--set", "heads=2", "--set", "ffn_dim=32", "--batch-size", "32"]
    argv += ["--epochs", "30", "--threads", "1", "--no-progress", "--max-minutes", "1"]
    assert tfam.cli.main([str(a) for a in argv]) == 0
    printed = capsys.readouterr().out
    assert "(budget 1 min: steps and schedule planned from the first steps)" in printed
    assert "budget 1 min -> " in printed and "warmup" in printed
    record = json.loads((out / "results.json").read_text())
    plan = record["budget"]["plan"]
    assert plan["fitted"] and plan["total_steps"] < plan["recipe_steps"]
    assert record["steps"] <= plan["total_steps"] and record["seconds"] <= 60.0
