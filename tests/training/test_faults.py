"""Faults and bad inputs: each is refused or stopped with one line that names the argument,
the file or the value, and nothing already saved is lost."""

from __future__ import annotations

import errno
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import tfam
from tfam.training import (
    CheckpointSaveError,
    NonFiniteLossError,
    RunLock,
    RunLockedError,
    TrainConfig,
    Trainer,
    read_checkpoint,
)
from tfam.training.runlock import LOCK_NAME

WORKER = Path(__file__).with_name("ddp_worker.py")
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class Synthetic:
    """200 seeded 1x8x8 images in 10 classes with a get_batch fast path."""

    def __init__(self, n: int = 200, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 10, (n,), generator=g)
        self.images = torch.randn(n, 1, 8, 8, generator=g) + self.labels.view(-1, 1, 1, 1) * 0.3

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        return self.images[i], int(self.labels[i])

    def get_batch(self, idx: torch.Tensor):
        return self.images[idx], self.labels[idx]


def tiny(num_classes: int = 10) -> torch.nn.Module:
    torch.manual_seed(0)
    return tfam.create_model(
        "vit",
        image_size=8,
        patch_size=2,
        in_channels=1,
        num_classes=num_classes,
        dim=16,
        depth=1,
        heads=2,
    )


def trainer(out: Path | None, **config) -> Trainer:
    settings = dict(epochs=1, batch_size=50, lr=1e-3, quiet=True, progress=False, device="cpu")
    settings.update(config)
    return Trainer(tiny(), Synthetic(), Synthetic(60, seed=1), TrainConfig(**settings), out)


def one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text, text
    return text


# ---------------------------------------------------------------------------------------------
# One run per directory


def test_a_second_run_into_a_busy_directory_is_refused(tmp_path: Path) -> None:
    """A real training holds the directory: the second one started beside it is refused."""
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(
        [sys.executable, str(WORKER), "--out", str(out), "--report", str(tmp_path / "rep")]
        + ["--epochs", "400", "--batch-size", "8"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        lock = out / LOCK_NAME
        deadline = time.monotonic() + 120
        while not (lock.is_file() and lock.read_text() == str(first.pid)):
            assert first.poll() is None, first.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the first run never took its lock"
            time.sleep(0.05)
        second = trainer(out)
        with pytest.raises(
            RunLockedError, match=rf"in use by another training \(pid {first.pid}\)"
        ):
            second.fit()
        assert first.poll() is None  # the first run was not disturbed
    finally:
        first.kill()
        first.wait()


def test_a_lock_left_by_a_killed_run_does_not_block(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    code = (
        f"import sys, time; sys.path.insert(0, {str(SRC)!r}); "
        "from tfam.training.runlock import RunLock; "
        f"RunLock({str(out)!r}).acquire(); print('locked', flush=True); time.sleep(120)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunLockedError, match=str(out)) as info:
            RunLock(out).acquire()
        one_line(info.value)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert (out / LOCK_NAME).is_file()  # the stale file is still there ...
    result = trainer(out).fit()  # ... and does not block
    assert result.steps == 4
    with RunLock(out):  # released when fit returned
        pass


def test_refuses_a_folder_holding_a_saved_model(tmp_path: Path) -> None:
    out = tmp_path / "model"
    tiny().save_pretrained(out)
    before = (out / "model.safetensors").read_bytes()
    for resume in (False, True):
        with pytest.raises(ValueError, match=r"holds a saved model .* no training checkpoint") as e:
            trainer(out).fit(resume=resume)
        one_line(e.value)
    assert (out / "model.safetensors").read_bytes() == before
    assert not (out / "checkpoints").exists()


def test_out_dir_under_a_file_is_named(tmp_path: Path) -> None:
    blocker = tmp_path / "notes.txt"
    blocker.write_text("a file")
    for out in (blocker, blocker / "run"):
        with pytest.raises(ValueError, match=rf"out_dir=.* is invalid: {blocker} is a file") as e:
            trainer(out).fit()
        one_line(e.value)
    assert blocker.read_text() == "a file"


# ---------------------------------------------------------------------------------------------
# Divergence and full disks


def test_a_diverging_run_stops_and_keeps_the_last_good_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run = trainer(out, lr=1e6, min_lr=0.0, save_every=1, epochs=3)
    with pytest.raises(
        NonFiniteLossError, match=r"training diverged: the (loss|gradient norm) is (nan|inf)"
    ) as e:
        run.fit()
    text = one_line(e.value)
    last = out / "checkpoints" / "last.pt"
    assert f"the last good checkpoint is kept: {last}" in text
    state = read_checkpoint(last)
    assert f"(step {state['global_step']})" in text
    assert state["global_step"] == run.global_step  # the diverged step was not taken
    assert all(torch.isfinite(t).all() for t in state["model"].values())
    assert not (out / "model.safetensors").exists()  # no NaN model is saved
    assert isinstance(e.value, ValueError)  # the command line turns it into exit status 2


def test_a_full_disk_during_a_save_says_the_previous_checkpoint_survives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    real_fsync, saves = os.fsync, []

    def fsync(fd: int) -> None:
        name = os.readlink(f"/proc/self/fd/{fd}")
        if ".last.pt.tmp" in name:
            saves.append(name)
            if len(saves) == 2:  # the second checkpoint hits a full disk
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc/self/fd to tell the checkpoint's file descriptor")
    monkeypatch.setattr(os, "fsync", fsync)
    run = trainer(out, save_every=1)
    with pytest.raises(CheckpointSaveError) as e:
        run.fit()
    text = one_line(e.value)
    last = out / "checkpoints" / "last.pt"
    assert "No space left on device" in text
    assert f"the previous checkpoint {last} is intact" in text
    monkeypatch.undo()
    assert read_checkpoint(last)["global_step"] == 1
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["last.pt"]


# ---------------------------------------------------------------------------------------------
# Settings


@pytest.mark.parametrize("seed", [-1, 2**63, 2**64, 1.5, True])
def test_seed_out_of_range_is_named(seed) -> None:
    with pytest.raises(ValueError, match=rf"seed={seed!r} is invalid: expected an int in") as e:
        TrainConfig(seed=seed)
    one_line(e.value)


def test_largest_seed_trains() -> None:
    run = trainer(None, seed=2**63 - 1, max_steps=1)
    assert run.fit().steps == 1


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("precision", "fp8", "precision='fp8' is invalid: expected one of fp32, bf16, fp16"),
        ("patience", 0, "patience=0 is invalid: expected an int >= 1"),
        ("num_workers", -1, "num_workers=-1 is invalid: expected an int >= 0"),
        ("dist_timeout", 0, "dist_timeout=0 is invalid"),
        ("init", "", "init='' is invalid"),
    ],
)
def test_new_fields_are_checked(field: str, value, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TrainConfig(**{field: value})


def test_bf16_and_precision_agree() -> None:
    assert TrainConfig(bf16=True).precision == "bf16"
    assert TrainConfig(precision="bf16").bf16 is True
    with pytest.raises(ValueError, match="bf16=True is invalid with precision='fp16'"):
        TrainConfig(bf16=True, precision="fp16")


def test_patience_without_a_validation_split_is_refused() -> None:
    with pytest.raises(ValueError, match="patience=2 is invalid without a validation split"):
        trainer(None, patience=2)


def test_nan_is_not_silently_averaged() -> None:
    """The finite check sees the step's loss: a NaN image makes the step fail, not vanish."""
    data = Synthetic()
    data.images[3, 0, 0, 0] = math.nan
    run = Trainer(tiny(), data, None, TrainConfig(epochs=1, batch_size=200, quiet=True))
    with pytest.raises(NonFiniteLossError, match="no checkpoint had been written yet"):
        run.fit()
