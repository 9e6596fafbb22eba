"""Kill -9 mid-epoch and resume == never stopped, bit for bit; bad checkpoints are detected,
named, and the previous good one is used."""

from __future__ import annotations

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
from tfam.training import (
    CheckpointError,
    CheckpointWarning,
    TrainConfig,
    Trainer,
    load_latest,
    read_checkpoint,
    read_metrics_csv,
    save_checkpoint,
)
from tfam.training.trainer import KILL_ENV

# 3 epochs of ceil(1437 / 64) = 23 steps, checkpoints every 5 steps and at epoch ends, with the
# default digits augmentation and Mixup/CutMix (so the augmentation generator, and the mixing
# drawn from it, are part of what must resume).
CLI_RUN = [
    "train",
    "vit",
    "--data",
    "digits",
    "--set",
    "dim=32",
    "--set",
    "depth=2",
    "--set",
    "heads=2",
    "--epochs",
    "3",
    "--batch-size",
    "64",
    "--save-every",
    "5",
    "--mixup",
    "0.8",
    "--cutmix",
    "1.0",
    "--threads",
    "1",
    "--quiet",
]


def tfam_cli(args: list[str], env_extra: dict[str, str] | None = None):
    env = {k: v for k, v in os.environ.items() if k != KILL_ENV}
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "tfam", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_sigkill_mid_epoch_then_resume_is_bit_exact(tmp_path: Path) -> None:
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    done = tfam_cli([*CLI_RUN, "--out", str(straight)])
    assert done.returncode == 0, done.stderr

    # The CLI trains on digits' fit split (1,295 images: 21 steps of 64 per epoch). Step 33 is
    # in epoch 2 (steps 22..42), 3 steps after the checkpoint of step 30.
    dead = tfam_cli([*CLI_RUN, "--out", str(killed)], {KILL_ENV: "33"})
    assert dead.returncode == -signal.SIGKILL, dead.stderr
    assert not (killed / "model.safetensors").exists()
    state = read_checkpoint(killed / "checkpoints" / "last.pt")
    assert (state["epoch"], state["batch_in_epoch"], state["global_step"]) == (1, 9, 30)
    assert state["permutation"] is not None  # mid-epoch: the epoch's data order is saved
    assert read_checkpoint(killed / "checkpoints" / "prev.pt")["global_step"] == 25

    # The documented resume command: every other setting comes from train_args.json.
    resumed = tfam_cli(["train", "vit", "--data", "digits", "--out", str(killed), "--resume"])
    assert resumed.returncode == 0, resumed.stderr
    assert "final test accuracy" in resumed.stdout

    a = load_file(str(straight / "model.safetensors"))
    b = load_file(str(killed / "model.safetensors"))
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    # The optimiser moments and the RNG streams also ended in the same place.
    sa = read_checkpoint(straight / "checkpoints" / "last.pt")
    sb = read_checkpoint(killed / "checkpoints" / "last.pt")
    for pid, moments in sa["optimizer"]["state"].items():
        for key, value in moments.items():
            assert torch.equal(value, sb["optimizer"]["state"][pid][key]), (pid, key)
    for key in ("torch", "data", "augment"):
        assert torch.equal(sa["rng"][key], sb["rng"][key]), key
    ra, rb = read_metrics_csv(straight / "metrics.csv"), read_metrics_csv(killed / "metrics.csv")
    assert len(ra) == len(rb) == 3
    for x, y in zip(ra, rb):
        for col in ("epoch", "step", "train_loss", "train_acc", "val_loss", "val_acc", "lr"):
            assert x[col] == y[col], col


# ---------------------------------------------------------------------------------------------
# Corrupted checkpoints


def tiny_trainer(out: Path | None, **config) -> Trainer:
    torch.manual_seed(0)
    model = tfam.create_model(
        "vit", image_size=8, patch_size=2, in_channels=1, num_classes=10, dim=16, depth=1, heads=2
    )
    settings = dict(epochs=1, batch_size=128, lr=1e-3, progress=False, quiet=True)
    settings.update(config)
    train, test = load_dataset("digits", "train"), load_dataset("digits", "test")
    return Trainer(model, train, test, TrainConfig(**settings), out_dir=out)


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def two_checkpoints(tmp_path: Path, one_thread) -> Path:
    """A run stopped by max_steps at step 10: last.pt = step 10, prev.pt = step 8."""
    out = tmp_path / "run"
    tiny_trainer(out, save_every=4, max_steps=10).fit()
    ckpt = out / "checkpoints"
    assert read_checkpoint(ckpt / "last.pt")["global_step"] == 10
    assert read_checkpoint(ckpt / "prev.pt")["global_step"] == 8
    return out


def test_truncated_checkpoint_is_named_and_previous_one_used(two_checkpoints: Path) -> None:
    ckpt = two_checkpoints / "checkpoints"
    last = ckpt / "last.pt"
    data = last.read_bytes()
    last.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=rf"{re.escape(str(last))}.*truncated"):
        read_checkpoint(last)
    with pytest.warns(
        CheckpointWarning, match=rf"{re.escape(str(last))}.*previous good checkpoint.*prev\.pt"
    ):
        state, path = load_latest(ckpt)
    assert path == ckpt / "prev.pt" and state["global_step"] == 8
    assert (ckpt / "last.pt.corrupt").is_file() and not last.exists()


def test_resume_after_corruption_continues_exactly_from_previous(two_checkpoints: Path) -> None:
    last = two_checkpoints / "checkpoints" / "last.pt"
    last.write_bytes(last.read_bytes()[:-100])
    reference = tiny_trainer(None)
    reference.fit()
    resumed = tiny_trainer(two_checkpoints)
    with pytest.warns(CheckpointWarning):
        resumed.fit(resume=True)
    assert resumed.global_step == reference.global_step == 12
    for name, tensor in reference.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[name], tensor), name
    # The bad file was moved aside, so the good generations rotate normally again.
    assert read_checkpoint(two_checkpoints / "checkpoints" / "last.pt")["global_step"] == 12


def test_flipped_byte_fails_the_checksum(two_checkpoints: Path) -> None:
    last = two_checkpoints / "checkpoints" / "last.pt"
    data = bytearray(last.read_bytes())
    data[-1000] ^= 0x01  # same length, one bit different in the payload
    last.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=rf"{re.escape(str(last))}.*SHA-256"):
        read_checkpoint(last)


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"", "is empty"), (b"PK\x03\x04 a torch zip", "does not start with the tfam checkpoint")],
)
def test_foreign_files_are_rejected(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "last.pt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=message):
        read_checkpoint(path)


def test_all_checkpoints_bad_is_an_error_listing_each(two_checkpoints: Path) -> None:
    ckpt = two_checkpoints / "checkpoints"
    for name in ("last.pt", "prev.pt"):
        (ckpt / name).write_bytes(b"TFAMCKPT1\n{}\n")
    with pytest.raises(CheckpointError, match=r"no usable checkpoint.*last\.pt.*prev\.pt"):
        load_latest(ckpt)
    # From the command line it is a clear error, not a traceback.
    from tfam.cli import main

    out = str(two_checkpoints)
    assert main(["train", "vit", "--data", "digits", "--out", out, "--resume", "--quiet"]) == 2


def test_failed_save_keeps_the_old_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save_checkpoint({"x": torch.arange(3)}, tmp_path)

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space left"):
        save_checkpoint({"x": torch.arange(5)}, tmp_path)
    monkeypatch.undo()
    assert torch.equal(read_checkpoint(tmp_path / "last.pt")["x"], torch.arange(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]  # no temp file left
