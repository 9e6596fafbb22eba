"""Reporting: what a run says and writes about itself, none of which changes its arithmetic.

The log lines (one per epoch, the final line, the progress bar's figures), the rows of
``metrics.csv`` (:mod:`tfam.training.metrics` writes them), the choice of the best epoch, the
run files (``train_args.json``, ``preprocess.json``, the saved model) and the
:class:`~tfam.training.results.TrainResult`.

Files written into ``out_dir`` (by rank 0): ``checkpoints/last.pt`` and ``checkpoints/prev.pt``
(see :mod:`tfam.training.checkpoint`), ``checkpoints/best-step<S>.pt`` (the best validation
epoch's weights, :mod:`tfam.training.best`), ``metrics.csv`` (see :mod:`tfam.training.metrics`),
``.tfam-train.lock`` (see :mod:`tfam.training.runlock`), and at the end ``config.json`` +
``model.safetensors`` (``model.save_pretrained``: the best validation epoch's weights),
``preprocess.json``, ``train_args.json``, ``results.json``;
callbacks may add more (``curves.png`` by :class:`tfam.training.callbacks.CurvesCallback`).
"""

from __future__ import annotations

import math
import sys
from typing import Any

from torch import Tensor

import tfam.training.distributed as D
import tfam.training.sharding as sharding
from tfam.training.errors import CheckpointSaveError
from tfam.training.memory import describe_peak, peak_memory
from tfam.training.results import (
    RESULTS_NAME,
    TrainResult,
    preprocess_info,
    results_record,
    write_json,
)
from tfam.training.sanity import classifier_problem

__all__ = ["ReportingMixin"]


class ReportingMixin:
    """The :class:`~tfam.training.Trainer`'s reporting. Reads its ``task`` (metrics, unit,
    primary metric), ``config``, ``history``, ``refit_plan`` and position; writes only log
    lines and files."""

    # Whole weights gathered at the end of an FSDP run (rank 0 saves the model from them).
    _full_weights: dict[str, Tensor] | None = None

    # -- names --------------------------------------------------------------------------------
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

    def _say(self, text: str, always: bool = False) -> None:
        if self.dist.is_main and (always or not self.config.quiet):
            from tqdm import tqdm

            tqdm.write(text, file=sys.stdout)
            sys.stdout.flush()

    def _fmt_metric(self, v: float) -> str:
        return f"{100 * v:.2f}%" if self.task.primary_metric == "acc" else f"{v:.4f}"

    # -- during the run -----------------------------------------------------------------------
    def _progress_postfix(self, sums: dict[str, float]) -> dict[str, str]:
        """The progress bar's figures from the epoch's running sums."""
        shown = self.task.reduce(sums)
        post = {k: f"{v:.4f}" for k, v in shown.items() if k != "acc"}
        if "acc" in shown:
            post["acc"] = f"{100 * shown['acc']:.2f}%"
        post[f"{self._unit_short}/s"] = (
            f"{sums['seen'] * self.dist.world_size / max(sums['train_seconds'], 1e-9):.0f}"
        )
        return post

    def _units(self, batch: dict[str, Tensor]) -> float:
        """The batch's size in the task's unit, for throughput: ``task.units(batch)`` when the
        task counts something other than rows (tokens, characters), else the rows."""
        units = getattr(self.task, "units", None)
        if units is not None:
            return float(units(batch))
        return float(next(iter(batch.values())).shape[0])

    def _epoch_row(
        self, train: dict[str, float], result: dict[str, float] | None, seen: float
    ) -> dict[str, Any]:
        """The metrics.csv row of the epoch just trained: ``train`` (reduced over the
        processes), the per-epoch split's ``result`` (None: not evaluated), ``seen`` units."""
        split = self.eval_split
        # Refit rows continue the epoch numbers after the selection run's (column "phase": 2).
        offset = self.refit_plan.selection_epochs if self.refit_plan is not None else 0
        row: dict[str, Any] = {"epoch": offset + self.epoch + 1, "step": self.global_step}
        for k in self.task.metrics:
            row[f"train_{k}"] = train.get(k, math.nan)
        for k in self.task.metrics:
            row[f"{split}_{k}"] = result.get(k, math.nan) if result is not None else math.nan
        row["lr"] = self.optimizer.param_groups[0]["lr"]
        row["seconds"] = self.elapsed()
        row[f"{self.task.unit}_per_s"] = seen / max(self.sums["train_seconds"], 1e-9)
        if self.config.refit:
            row["phase"] = self.phase
        return row

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

    def _final_row_metrics(self) -> dict[str, float]:
        rows = [r for r in self.history if r.get("phase", 1) == 1]  # refit rows have no scores
        if not rows:
            return {}
        row = rows[-1]
        return {k: row.get(f"{self.eval_split}_{k}", math.nan) for k in self.task.metrics}

    # -- files --------------------------------------------------------------------------------
    def _write_run_files(self, final: bool) -> None:
        assert self.out_dir is not None
        self.out_dir.mkdir(parents=True, exist_ok=True)
        args = {**self.run_args, "train_config": self.config.to_dict()}
        write_json(self.out_dir / "train_args.json", args)
        info = preprocess_info(self.train_set)
        if info is not None:
            write_json(self.out_dir / "preprocess.json", info)
        # Files a dataset keeps with its runs (name -> JSON object): a pixel dataset's palette.
        run_files = getattr(self.train_set, "run_files", None)
        if callable(run_files):
            for name, data in run_files().items():
                write_json(self.out_dir / name, data)
        if final and hasattr(self.model, "save_pretrained"):
            try:
                sharding.plain_model(self.model, self._full_weights).save_pretrained(self.out_dir)
            except OSError as err:
                raise CheckpointSaveError(
                    f"could not write the final model into {self.out_dir}: "
                    f"{err.strerror or err}; the last checkpoint in {self.checkpoint_dir} is "
                    "intact (resume writes the model again)"
                ) from None

    def _saved_text(self, r: TrainResult) -> str:
        """Which weights were saved (and tested), for the final line: " of the saved model,
        epoch 7 of 10 (best val 75.00%; last epoch val 54.17%)"."""
        fmt, saved = self._fmt_metric, r.saved
        metric = self.task.primary_metric
        best = self._best_row()
        if not self.keeps_best:  # no validation split: the last weights are saved
            chosen = ""
            if best is not None:
                chosen = (
                    f"best {self.eval_split} {fmt(self._score(best))} at epoch {best['epoch']}; "
                )
            what = "epoch" if saved.get("rule") != "last step" else "step"
            return f" ({chosen}the last {what} is saved: no validation split)"
        val = saved.get("val", {}).get(metric, math.nan)
        last = r.val_metrics.get(metric, math.nan)
        if saved.get("rule") == "last step":
            where = f"the last step ({self.global_step}), val {fmt(val)}"
            if best is not None:
                where += f"; best epoch {best['epoch']}: val {fmt(self._score(best))}"
            return f" of the saved model: {where}"
        text = f" of the saved model: epoch {saved.get('epoch')}, best val {fmt(val)}"
        if int(saved.get("epoch", -1)) != self.epoch:
            text += f" (last epoch {self.epoch}: val {fmt(last)})"
        return text

    # -- the result ---------------------------------------------------------------------------
    # -- the end ------------------------------------------------------------------------------
    def _finish(self, stopped_early: bool) -> TrainResult:
        if self.refit_plan is not None:  # the selection run's scores; test is the refit's
            per_epoch = dict(self.refit_plan.selection_val)
            stopped_early = self.refit_plan.selection_stopped
        elif self.history and self.batch_in_epoch == 0:
            per_epoch = self._final_row_metrics()
        else:  # stopped mid-epoch: evaluate the weights as they are
            # (a budget sizes the final evaluations to the time left: tfam.training.budget)
            share = self._val_share()
            per_epoch = self._final_metrics(share=share) or {}
        # The weights to save and test: the best validation epoch's (tfam.training.best).
        self.saved = self._choose_saved(per_epoch if self.val_set is not None else {})
        if self.val_set is not None:
            test = (self._final_metrics(self.test_set) or {}) if self.test_set is not None else {}
            result = self._result(test, per_epoch, stopped_early)
        else:
            result = self._result(per_epoch if self.test_set is not None else {}, {}, stopped_early)
        result.budget = self._budget_record()
        if self._sharded:
            self._full_weights = sharding.full_state(self.model, self.optimizer, True)[0]
        if self.out_dir is not None and self.dist.is_main:
            self._write_run_files(final=True)
            # The peak so far, final evaluation included (results.json: bytes).
            record = {**results_record(result), "peak_memory": peak_memory(self.device)}
            write_json(self.out_dir / RESULTS_NAME, record)
        D.barrier(self.dist)
        if self.dist.is_main:
            for cb in self.callbacks:
                if hasattr(cb, "on_finish"):
                    cb.on_finish(self, result)
        # Said even when quiet: the one line a scripted run needs (nothing without a score).
        scored = bool(result.test_metrics or result.val_metrics)
        self._say(self._final_line(result), always=scored)
        self._note_chance(result)
        return result

    def _val_share(self) -> float:
        """The share of the time left that a mid-epoch validation may take before the test
        split's evaluation: its share of the examples of the two."""
        if self.val_set is None or self.test_set is None:
            return 1.0
        return len(self.val_set) / max(len(self.val_set) + len(self.test_set), 1)

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
            saved=dict(getattr(self, "saved", None) or {}) if not already_finished else {},
        )

    def _final_line(self, r: TrainResult) -> str:
        metric = self.task.primary_metric
        test = r.test_metrics.get(metric, math.nan)
        if math.isnan(test) and not r.val_metrics:
            return f"{_count(self.epoch, 'epoch')}, {self.global_step} steps in {r.seconds:.1f} s"

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
            saved = self._saved_text(r)
            text += saved if not math.isnan(test) else saved.replace(" of the saved", "; the saved")
            epochs = _count(self.epoch, "epoch")
        text += f"; {epochs}, {self.global_step} steps in {r.seconds:.1f} s"
        text += self._budget_note()
        if self.out_dir is not None:
            text += f"; model and logs in {self.out_dir}"
        peak = describe_peak(peak_memory(self.device))
        return f"{text}; {peak}" if peak else text

    def _note_chance(self, r: TrainResult) -> None:
        """A ``tfam: note:`` on stderr when a classifier's per-epoch split (validation, else
        test) accuracy is at chance (:func:`tfam.training.sanity.classifier_problem`)."""
        if not self.dist.is_main:
            return
        has_val = self.val_set is not None
        problem = classifier_problem(
            self.task,
            self.val_set if has_val else self.test_set,
            r.val_metrics if has_val else r.test_metrics,
            "validation" if has_val else "test",
        )
        if problem is not None:
            print(f"tfam: note: {problem}", file=sys.stderr, flush=True)


def _count(n: int, noun: str) -> str:
    """'1 epoch', '0 epochs', '3 epochs'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
