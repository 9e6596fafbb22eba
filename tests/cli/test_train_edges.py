"""Rough edges of `tfam train` (issue 21): each one a regression test. A fault is ONE line
`tfam: error: ...` naming the option, exit status 2, no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tfam.training import TrainConfig
from tfam.training.runlock import RunLock
from tfam.training.trainer import KILL_ENV, KILL_RANK_ENV

SRC = Path(__file__).resolve().parents[2] / "src"
TINY = ["--set", "dim=16", "--set", "depth=1", "--set", "heads=2", "--set", "patch_size=4"]


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (KILL_ENV, KILL_RANK_ENV)}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra or {})
    return env


def tfam_cli(*args: str, env_extra: dict[str, str] | None = None, timeout: float = 300):
    """`python -m tfam ARGS` in a subprocess with this checkout's source."""
    return subprocess.run(
        [sys.executable, "-m", "tfam", *args],
        env=cli_env(env_extra),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The run failed with exit 2 and exactly one `tfam: error:` line, no traceback."""
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("tfam: error: ") and "Traceback" not in done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """Two classes of 8x8 RGB PNGs, 24 each: a dataset decoded per item (DataLoader workers)."""
    from PIL import Image

    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for c, name in enumerate(("dark", "light")):
        (root / name).mkdir()
        for i in range(24):
            pixels = rng.integers(0, 128, (8, 8, 3)) + 100 * c
            Image.fromarray(pixels.astype(np.uint8)).save(root / name / f"{i}.png")
    return root


# ---------------------------------------------------------------------------------------------
# The run lock is the trainer's alone


def test_resume_right_after_kill_9_with_workers(folder: Path, tmp_path: Path) -> None:
    """DataLoader workers forked by the trainer must not hold its lock: they outlive a kill -9
    by seconds, and a resume started at once was refused naming the dead trainer's pid."""
    out = tmp_path / "run"
    args = ["train", "vit", "--data", str(folder), "--out", str(out), *TINY, "--quiet"]
    args += ["--epochs", "40", "--batch-size", "8", "--save-every", "2", "--num-workers", "2"]
    # Output to a file, not a pipe: waiting for a pipe's end would wait for the workers too.
    # Step 3 of 5 an epoch: the epoch's workers are alive when the trainer dies.
    with open(tmp_path / "log.txt", "w") as log:
        killed = subprocess.run(
            [sys.executable, "-m", "tfam", *args],
            env=cli_env({KILL_ENV: "3"}),
            stdout=log,
            stderr=log,
            timeout=300,
        )
    assert killed.returncode == -9, (killed.returncode, (tmp_path / "log.txt").read_text())
    with RunLock(out):  # free at once: no worker holds it (they lingered ~5 s after the kill)
        pass
    resumed = tfam_cli(*args, "--resume", "--max-steps", "6")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "in use by another training" not in resumed.stderr


# ---------------------------------------------------------------------------------------------
# --set KEY=none


def test_set_none_is_the_string_where_the_field_takes_a_string(tmp_path: Path, cli) -> None:
    """`position` is a str field whose valid values include 'none' (no position embedding):
    `--set position=none` was refused as "position=None is invalid: ... 'none'"."""
    out = tmp_path / "run"
    code, stdout, err = cli(
        ["train", "vit", "--data", "digits", "--out", out, "--set", "position=none"]
        + ["--set", "dim=16", "--set", "depth=1", "--set", "heads=2", "--max-steps", "1"]
    )
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())
    assert config["position"] == "none"


def test_none_as_text_keeps_none_for_optional_fields() -> None:
    from tfam.cli.common import none_as_text, parse_sets
    from tfam.config import config_class

    sets = parse_sets(["position=none", "dim=none"])
    assert none_as_text(sets, config_class("vit")) == {"position": "none", "dim": None}
    assert none_as_text({"init": None}, TrainConfig) == {"init": None}  # str | None


# ---------------------------------------------------------------------------------------------
# A recipe's warmup in steps follows a shorter run


def test_recipe_warmup_steps_scale_to_fewer_epochs(tmp_path: Path, cli) -> None:
    """The reverse recipe warms up over 200 steps of its 10 epochs (1570 steps); `--epochs 1`
    (157 steps) was refused for a warmup the user never gave."""
    out = tmp_path / "run"
    code, stdout, err = cli(
        ["train", "transformer", "--data", "reverse", "--epochs", "1", "--max-steps", "1"]
        + ["--out", out]
    )
    assert code == 0, err
    saved = json.loads((out / "train_args.json").read_text())["train_config"]
    assert saved["warmup_steps"] == 20  # 200 * 1/10
    code, _, err = cli(
        ["train", "transformer", "--data", "reverse", "--epochs", "1", "--max-steps", "1"]
        + ["--warmup-steps", "200", "--out", tmp_path / "given"]
    )
    assert code == 2 and "--warmup-steps 200 is invalid" in err  # a value given is kept


def test_recipe_warmup_steps_unchanged_for_the_recipe_length() -> None:
    import argparse

    from tfam.cli.train import _train_values
    from tfam.data import resolve_data

    entry = resolve_data("reverse")
    values, _ = _train_values(argparse.Namespace(out="x"), None, entry)
    assert values["warmup_steps"] == entry.recipe.train["warmup_steps"] == 200
    values, _ = _train_values(argparse.Namespace(out="x", batch_size=128), None, entry)
    assert values["warmup_steps"] == 100  # twice the batch: half the steps


# ---------------------------------------------------------------------------------------------
# --nproc: the device checked before torchrun, the header names the processes


def test_nproc_with_a_missing_gpu_is_one_line(tmp_path: Path, cli, one_line, monkeypatch) -> None:
    """Without CUDA, `--device cuda --nproc 2` printed torchrun's ~48-line ChildFailedError
    report (every worker failed); without --nproc it was already one line."""
    import torch

    import tfam.training.distributed as D

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    launched = []
    monkeypatch.setattr(D.subprocess, "call", lambda *a, **k: launched.append(a) or 0)
    for device in ("cuda", "cuda:1", "mps"):
        code, _, err = cli(
            ["train", "vit", "--data", "digits", "--out", tmp_path / "run", "--device", device]
            + ["--nproc", "2"]
        )
        assert code == 2
        assert one_line(err).startswith(f"tfam: error: --device {device!r} is invalid (--nproc 2)")
    assert launched == []  # torchrun never started
    assert not (tmp_path / "run").exists()


def test_check_launch_backend_and_gpu_count(monkeypatch) -> None:
    import torch

    from tfam.training.distributed import check_launch

    assert check_launch(2, "cpu") == "gloo"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match=r"^--nproc 2 is invalid with --device 'cuda': this "):
        check_launch(2, "cuda")
    with pytest.raises(ValueError, match=r"give --device cuda$"):
        check_launch(2, "cuda:0")


def test_processes_text() -> None:
    from tfam.training.distributed import DistInfo, processes_text

    assert processes_text(1, DistInfo()) == "1 thread"
    assert processes_text(4, DistInfo()) == "4 threads"
    assert processes_text(1, DistInfo(0, 2), "cpu") == "2 processes (gloo), 1 thread each"


def test_nproc_2_header_names_the_processes_and_backend(tmp_path: Path) -> None:
    """A real two-process CPU run under torchrun, two steps: rank 0's header says how it runs."""
    done = tfam_cli(
        "train", "vit", "--data", "digits", "--out", str(tmp_path / "run"), *TINY[:6],
        "--threads", "1", "--max-steps", "2", "--batch-size", "16", "--nproc", "2",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    headers = [line for line in done.stdout.splitlines() if " parameters) on digits" in line]
    assert len(headers) == 1, done.stdout  # rank 0 alone speaks
    assert "2 processes (gloo), 1 thread each -> " in headers[0], headers[0]
