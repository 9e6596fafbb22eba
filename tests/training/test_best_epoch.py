"""The saved model is the best validation epoch's: its weights, its test score, what the summary
and results.json say, `tfam eval` agreeing, and the best state surviving kill -9 and resume."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import tfam
from tfam.data import load_dataset
from tfam.training import TrainConfig, Trainer, read_checkpoint
from tfam.training.best import BEST_PREFIX
from tfam.training.trainer import KILL_ENV

pytestmark = pytest.mark.usefixtures("one_thread")

# Digits with a tiny ViT and patience 1: validation accuracy stops improving before the last
# epoch (epoch 6 of 7 on one machine, 5 of 6 on another: BLAS numerics differ by CPU), so the
# tests read which epoch was best from the run's own metrics.csv, and check the rest by it.
RUN = ["train", "vit", "--data", "digits", "--set", "dim=16", "--set", "depth=1"]
RUN += ["--set", "heads=2", "--epochs", "12", "--batch-size", "32", "--lr", "0.02"]
RUN += ["--schedule", "inverse_sqrt", "--patience", "1", "--threads", "1", "--no-augment"]
STEPS_PER_EPOCH = 41  # ceil(1295 fit images / 32)


def tfam_cli(args: list[str], env_extra: dict[str, str] | None = None):
    env = {k: v for k, v in os.environ.items() if k != KILL_ENV}
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "tfam", *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("best") / "straight"
    done = tfam_cli([*RUN, "--out", out])
    assert done.returncode == 0, done.stderr
    return out, done.stdout


def best_epoch_of(out: Path) -> int:
    """The epoch of the highest validation accuracy in the run's metrics.csv (the first on a
    tie), read independently of results.json."""
    with (out / "metrics.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["val_acc"]]
    best = max(rows, key=lambda r: (float(r["val_acc"]), -int(r["epoch"])))
    return int(best["epoch"])


def test_the_saved_model_is_the_best_epoch(straight) -> None:
    out, said = straight
    results = json.loads((out / "results.json").read_text())
    best, last_epoch = best_epoch_of(out), results["epochs_completed"]
    # Patience 1: the run stops one epoch after the best, so the saved model is not the last.
    assert results["best_epoch"] == best and last_epoch == best + 1 < 12
    assert results["stopped_early"] is True
    assert results["saved"]["epoch"] == best and results["saved"]["rule"] == "best val"
    step = best * STEPS_PER_EPOCH
    assert results["saved"]["step"] == step
    assert results["saved"]["val"] == results["best_val"]
    saved = load_file(str(out / "model.safetensors"))
    # The checkpoints: last.pt ends the last epoch (kept for resuming), prev.pt the best one.
    last = read_checkpoint(out / "checkpoints" / "last.pt")
    prev = read_checkpoint(out / "checkpoints" / "prev.pt")
    assert (last["epoch"], prev["epoch"]) == (last_epoch, best)
    assert all(torch.equal(saved[k], prev["model"][k]) for k in saved)
    assert not all(torch.equal(saved[k], last["model"][k]) for k in saved)
    # Only the best file the checkpoints refer to is left.
    assert last["best"] == {"epoch": best, "step": step, "file": f"{BEST_PREFIX}{step}.pt"}
    files = sorted(p.name for p in (out / "checkpoints").glob(f"{BEST_PREFIX}*"))
    assert files == [f"{BEST_PREFIX}{step}.pt"]
    # The summary names the saved epoch, its validation and test scores, and the last epoch.
    test = 100 * results["test"]["acc"]
    val = 100 * results["saved"]["val"]["acc"]
    last_val = 100 * results["val"]["acc"]
    assert (
        f"final test accuracy {test:.2f}% of the saved model: epoch {best}, best val {val:.2f}% "
        f"(last epoch {last_epoch}: val {last_val:.2f}%)" in said
    )


def test_eval_of_the_saved_model_equals_the_summary(straight) -> None:
    out, said = straight
    shown = re.search(r"final test accuracy (\d+\.\d\d)%", said)
    assert shown is not None, said
    done = tfam_cli(["eval", out])
    assert done.returncode == 0, done.stderr
    assert f"accuracy: {shown.group(1)}%" in done.stdout, done.stdout


def test_kill_after_the_best_epoch_then_resume_keeps_it(straight, tmp_path: Path) -> None:
    """Killed in the epoch after the best, after the best weights went to disk: the resumed
    process never sees the best epoch, yet saves its weights, bit for bit; a stray best file
    is removed."""
    out, _ = straight
    killed = tmp_path / "killed"
    best = best_epoch_of(out)
    dead = tfam_cli([*RUN, "--out", killed], {KILL_ENV: str(best * STEPS_PER_EPOCH + 10)})
    assert dead.returncode == -signal.SIGKILL, dead.stderr
    assert not (killed / "model.safetensors").exists()
    stray = killed / "checkpoints" / f"{BEST_PREFIX}1.pt"  # as a kill before a rename leaves
    stray.write_bytes(b"")
    resumed = tfam_cli(["train", "vit", "--data", "digits", "--out", killed, "--resume"])
    assert resumed.returncode == 0, resumed.stderr
    a = load_file(str(out / "model.safetensors"))
    b = load_file(str(killed / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ra = json.loads((out / "results.json").read_text())
    rb = json.loads((killed / "results.json").read_text())
    for key in ("test", "val", "best_val", "saved", "best_epoch", "steps"):
        assert ra[key] == rb[key], key
    assert not stray.exists()


def tiny(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return tfam.create_model(
        "vit", image_size=8, patch_size=2, in_channels=1, num_classes=10, dim=16, depth=1, heads=2
    )


class Snapshots:
    """A callback keeping each epoch's end-of-epoch weights."""

    def __init__(self) -> None:
        self.weights: dict[int, dict[str, torch.Tensor]] = {}

    def on_epoch_end(self, trainer, row) -> None:
        state = trainer.model.state_dict()
        self.weights[int(row["epoch"])] = {k: v.clone() for k, v in state.items()}


def test_in_memory_run_restores_the_best_epoch() -> None:
    """Without out_dir the best weights are kept in memory; the model after fit is the best
    epoch's, and its test score is the one returned."""
    fit, test = load_dataset("digits", "fit"), load_dataset("digits", "test")
    val = torch.utils.data.Subset(load_dataset("digits", "val"), range(12))
    # The restore only shows when the best epoch is not the last. Which epoch 12 noisy
    # validation images favour shifts with library versions and thread counts, so the first
    # of a few seeds whose best epoch comes before the last is the one checked.
    for seed in range(5):
        snaps = Snapshots()
        config = TrainConfig(
            epochs=6, batch_size=64, lr=2e-2, seed=seed, progress=False, quiet=True, num_workers=0
        )
        model = tiny(seed)
        trainer = Trainer(model, fit, test, config, val_set=val, callbacks=[snaps])
        result = trainer.fit()
        best = result.best_epoch
        if best < config.epochs:
            break
    else:
        pytest.fail("no seed's validation score peaked before the last epoch: nothing to restore")
    assert result.saved["epoch"] == best and result.saved["rule"] == "best val"
    assert all(torch.equal(v, snaps.weights[best][k]) for k, v in model.state_dict().items())
    assert result.final_test_acc == trainer.evaluate(test)[1]


def test_without_validation_the_last_epoch_is_saved(tmp_path: Path, capsys) -> None:
    fit, test = load_dataset("digits", "fit"), load_dataset("digits", "test")
    snaps = Snapshots()
    config = TrainConfig(epochs=3, batch_size=128, lr=2e-2, progress=False)
    model = tiny()
    result = Trainer(model, fit, test, config, out_dir=tmp_path / "r", callbacks=[snaps]).fit()
    assert result.saved["rule"] == "last epoch" and result.saved["epoch"] == 3
    saved = load_file(str(tmp_path / "r" / "model.safetensors"))
    assert all(torch.equal(v, snaps.weights[3][k]) for k, v in saved.items())
    said = capsys.readouterr().out
    assert "the last epoch is saved: no validation split" in said
    assert not list((tmp_path / "r" / "checkpoints").glob(f"{BEST_PREFIX}*"))


def test_stopped_mid_epoch_saves_the_better_of_best_epoch_and_last_step() -> None:
    """max_steps inside epoch 6: the best epoch (5) is saved unless the last step's weights
    score better on validation."""
    fit, test = load_dataset("digits", "fit"), load_dataset("digits", "test")
    val = torch.utils.data.Subset(load_dataset("digits", "val"), range(12))
    snaps = Snapshots()
    config = TrainConfig(
        epochs=6,
        batch_size=64,
        lr=2e-2,
        progress=False,
        quiet=True,
        num_workers=0,
        max_steps=5 * 21 + 3,
    )
    model = tiny()
    trainer = Trainer(model, fit, test, config, val_set=val, callbacks=[snaps])
    result = trainer.fit()
    assert result.epochs_completed == 5 and result.steps == 5 * 21 + 3
    saved = result.saved
    if saved["rule"] == "best val":
        assert saved["epoch"] == result.best_epoch
        assert all(torch.equal(v, snaps.weights[saved["epoch"]][k]) for k, v in
                   model.state_dict().items())  # fmt: skip
    else:
        assert saved["rule"] == "last step" and saved["step"] == 5 * 21 + 3
        assert saved["val"]["acc"] > result.best_val_acc
    assert result.final_test_acc == trainer.evaluate(test)[1]
