"""Two processes with torchrun and gloo on loopback: DDP equals one process with the same
global batch, only rank 0 writes, kill -9 of a rank then resume is bit-exact, and a dead rank
ends the job with a non-zero exit instead of a hang."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tfam.training import launch_command, read_checkpoint, read_metrics_csv
from tfam.training.trainer import KILL_ENV, KILL_RANK_ENV

WORKER = Path(__file__).with_name("ddp_worker.py")
# 256 examples, global batch 32: 8 steps per epoch, 2 epochs; checkpoints every 5 steps.
RUN = ["--batch-size", "32", "--epochs", "2", "--save-every", "5"]
TIMEOUT = 300  # far above a healthy run; a hang would hit it


def run(
    out: Path, *args: str, nproc: int = 2, env_extra: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if k not in (KILL_ENV, KILL_RANK_ENV)}
    env.update(env_extra or {})
    env["OMP_NUM_THREADS"] = "1"
    worker = [str(WORKER), "--out", str(out), "--report", str(out) + "-report", *args]
    if nproc == 1:
        command = [sys.executable, *worker]
    else:
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            str(nproc),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            "localhost:0",
            *worker,
        ]
    t = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    return done, time.perf_counter() - t


def weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(str(out / "model.safetensors"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[Path, float]]:
    base = tmp_path_factory.mktemp("ddp")
    made = {}
    for name, nproc, extra in (
        ("one", 1, []),
        ("two", 2, []),
        ("two_aug", 2, ["--augment", "--dropout", "0.1"]),
    ):
        out = base / name
        done, seconds = run(out, *RUN, *extra, nproc=nproc)
        assert done.returncode == 0, done.stderr[-3000:]
        made[name] = (out, seconds)
    return made


def test_two_ranks_equal_one_process_with_the_same_global_batch(runs) -> None:
    (one, _), (two, _) = runs["one"], runs["two"]
    a, b = weights(one), weights(two)
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=0, atol=1e-6, msg=name)
    assert any(not torch.equal(a[n], b[n]) for n in a)  # really two different computations
    ra, rb = read_metrics_csv(one / "metrics.csv"), read_metrics_csv(two / "metrics.csv")
    assert [r["step"] for r in ra] == [r["step"] for r in rb] == [8, 16]
    for x, y in zip(ra, rb):
        assert y["train_loss"] == pytest.approx(x["train_loss"], rel=1e-5)
        assert y["test_acc"] == x["test_acc"]


def test_only_rank_zero_writes(runs) -> None:
    two, _ = runs["two"]
    rank0 = json.loads(Path(str(two) + "-report", "writes-0.json").read_text())
    rank1 = json.loads(Path(str(two) + "-report", "writes-1.json").read_text())
    assert any("model.safetensors" in w for w in rank0)  # the spy sees writes
    assert any("last.pt" in w for w in rank0)
    assert rank1 == []
    state = read_checkpoint(two / "checkpoints" / "last.pt")
    assert state["world_size"] == 2 and len(state["ranks"]) == 2


def test_kill_a_rank_then_resume_is_bit_exact(runs, tmp_path: Path) -> None:
    straight, _ = runs["two_aug"]
    out = tmp_path / "killed"
    extra = ["--augment", "--dropout", "0.1"]
    # Rank 1 dies by SIGKILL after step 12 (epoch 2); the last checkpoint is step 10.
    dead, seconds = run(out, *RUN, *extra, env_extra={KILL_ENV: "12", KILL_RANK_ENV: "1"})
    assert dead.returncode != 0, dead.stdout
    assert seconds < 120, seconds  # torchrun stopped the group; nobody waited for a timeout
    assert not (out / "model.safetensors").exists()
    state = read_checkpoint(out / "checkpoints" / "last.pt")
    assert (state["epoch"], state["batch_in_epoch"], state["global_step"]) == (1, 2, 10)

    resumed, _ = run(out, *RUN, *extra, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = weights(straight), weights(out)
    for name in a:
        assert torch.equal(a[name], b[name]), name
    sa = read_checkpoint(straight / "checkpoints" / "last.pt")
    sb = read_checkpoint(out / "checkpoints" / "last.pt")
    for r in range(2):  # every rank's random streams ended in the same place
        for key in ("torch", "augment"):
            assert torch.equal(sa["ranks"][r][key], sb["ranks"][r][key]), (r, key)
    assert not torch.equal(sa["ranks"][0]["augment"], sa["ranks"][1]["augment"])  # per rank
    ra, rb = read_metrics_csv(straight / "metrics.csv"), read_metrics_csv(out / "metrics.csv")
    assert [(r["train_loss"], r["test_acc"]) for r in ra] == [
        (r["train_loss"], r["test_acc"]) for r in rb
    ]


def test_dead_rank_zero_ends_the_job_nonzero(tmp_path: Path) -> None:
    out = tmp_path / "dead0"
    dead, seconds = run(out, *RUN, env_extra={KILL_ENV: "3", KILL_RANK_ENV: "0"})
    assert dead.returncode != 0
    assert seconds < 120, seconds
    assert "exitcode" in dead.stderr or "SIGKILL" in dead.stderr or "Signal 9" in dead.stderr


def test_launch_command_runs_torchrun() -> None:
    cmd = launch_command(3, ["train", "vit", "--data", "digits"])
    assert cmd[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert cmd[cmd.index("--nproc_per_node") + 1] == "3"
    assert cmd[-6:] == ["-m", "tfam", "train", "vit", "--data", "digits"]
    with pytest.raises(ValueError, match="nproc=0 is invalid"):
        launch_command(0, [])


def test_fsdp_kill_and_resume_equals_one_process(runs, tmp_path: Path) -> None:
    """FSDP (parameters sharded over the 2 ranks) trains the same model as one process, and
    its checkpoints (gathered to full tensors on rank 0) resume after a killed rank."""
    one, _ = runs["one"]
    out = tmp_path / "fsdp"
    dead, _ = run(out, *RUN, "--fsdp", env_extra={KILL_ENV: "12", KILL_RANK_ENV: "1"})
    assert dead.returncode != 0
    state = read_checkpoint(out / "checkpoints" / "last.pt")
    assert state["global_step"] == 10
    assert set(state["model"]) == set(weights(one))  # whole tensors, plain names
    resumed, _ = run(out, *RUN, "--fsdp", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = weights(one), weights(out)
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=0, atol=1e-6, msg=name)
