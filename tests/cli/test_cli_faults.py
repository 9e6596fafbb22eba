"""Hostile input to the command line: each fault is ONE line `tfam: error: ...` naming the
argument or the file, exit status 2, no traceback, and nothing half-written."""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path

import pytest

import tfam

DIGITS = ["train", "vit", "--data", "digits", "--quiet"]
TINY = ["--set", "dim=16", "--set", "depth=1", "--set", "heads=2"]


def png_claiming(width: int, height: int) -> bytes:
    """A small PNG whose header claims width x height pixels (a decompression bomb)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + chunk(b"IEND", b"")
    )


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A model directory as `tfam train` leaves it, for 8x8 grey images in three classes."""
    d = tmp_path_factory.mktemp("run")
    model = tfam.create_model(
        "vit", image_size=8, patch_size=4, in_channels=1, num_classes=3, dim=8, depth=1, heads=2
    )
    model.save_pretrained(d)
    pre = {"dataset": None, "image_size": [8, 8], "in_channels": 1, "mean": [0.2], "std": [0.3],
           "classes": ["a", "b", "c"], "pixel_scale": 255.0}  # fmt: skip
    (d / "preprocess.json").write_text(json.dumps(pre))
    return d


def test_decompression_bomb_is_named(run_dir: Path, tmp_path: Path, cli, one_line) -> None:
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(png_claiming(30_000, 30_000))
    code, out, err = cli(["predict", run_dir, bomb])
    assert code == 2 and out == ""
    line = one_line(err)
    assert "bomb.png" in line and "MAX_IMAGE_PIXELS" in line


def test_decompression_bomb_in_an_image_folder_is_named(
    image_folder: Path, tmp_path, cli, one_line
) -> None:
    (image_folder / "spot" / "huge.png").write_bytes(png_claiming(20_000, 20_000))
    code, _, err = cli([*DIGITS[:2], "--data", image_folder, "--out", tmp_path / "r"])
    assert code == 2
    assert "huge.png" in one_line(err)


@pytest.mark.parametrize("threads", ["0", "-1", "100000"])
def test_absurd_threads_are_refused(threads: str, tmp_path: Path, cli, one_line) -> None:
    code, _, err = cli([*DIGITS, "--threads", threads, "--out", tmp_path / "r", *TINY])
    assert code == 2
    line = one_line(err)
    limit = 4 * (os.cpu_count() or 1)
    assert f"--threads {threads} is invalid" in line and f"1..{limit}" in line
    assert not (tmp_path / "r").exists()


def test_pad_larger_than_the_image_is_refused(tmp_path: Path, cli, one_line) -> None:
    code, _, err = cli([*DIGITS, "--pad", "5", "--out", tmp_path / "r", *TINY])
    assert code == 2
    line = one_line(err)
    assert "--pad 5 is invalid for 8x8 images" in line and "0..4" in line
    assert not (tmp_path / "r").exists()
    # The limit itself is accepted.
    code, _, err = cli([*DIGITS, "--pad", "4", "--max-steps", "1", "--out", tmp_path / "ok", *TINY,
                        "--threads", "1"])  # fmt: skip
    assert code == 0, err
    # Pixel sequences (iGPT) take the same option and the same limit.
    pixels = ["train", "igpt", "--data", "digits-pixels", "--quiet", *TINY, "--threads", "1"]
    code, _, err = cli([*pixels, "--pad", "5", "--out", tmp_path / "p"])
    assert code == 2 and "--pad 5 is invalid for 8x8 images" in one_line(err)
    code, _, err = cli([*pixels, "--pad", "1", "--max-steps", "1", "--out", tmp_path / "p1"])
    assert code == 0, err


def test_min_lr_above_lr_is_refused_not_lowered(tmp_path: Path, cli, one_line) -> None:
    code, _, err = cli([*DIGITS, "--lr", "0.001", "--min-lr", "0.01", "--out", tmp_path / "r"])
    assert code == 2
    assert "--min-lr 0.01 is invalid" in one_line(err)
    # The recipe's min_lr (1e-5) above a small --lr: the same one validation, naming the source.
    code, _, err = cli([*DIGITS, "--lr", "1e-6", "--out", tmp_path / "r"])
    assert code == 2
    line = one_line(err)
    assert "--min-lr 1e-05 is invalid" in line and "digits recipe" in line
    assert not (tmp_path / "r").exists()


def test_corrupt_file_in_an_image_folder_is_named(
    image_folder: Path, tmp_path, cli, one_line
) -> None:
    png = (image_folder / "bars" / "000.png").read_bytes()
    (image_folder / "bars" / "cut.png").write_bytes(png[: len(png) // 2])  # truncated
    code, _, err = cli([*DIGITS[:2], "--data", image_folder, "--out", tmp_path / "r"])
    assert code == 2
    assert "cut.png" in one_line(err)


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("dim", "--set 'dim' is invalid: expected KEY=VALUE"),
        ("=16", "--set '=16' is invalid: expected KEY=VALUE"),
        ('attention_options={"window":', "is not valid JSON"),
    ],
)
def test_invalid_set_syntax(item: str, expected: str, tmp_path: Path, cli, one_line) -> None:
    for argv in ([*DIGITS, "--out", tmp_path / "r"], ["explain", "vit"]):
        code, _, err = cli([*argv, "--set", item])
        assert code == 2
        assert expected in one_line(err)


def test_unknown_device_names_what_is_available(
    run_dir: Path, tmp_path: Path, cli, one_line
) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    for argv in (["eval", run_dir, "--data", "digits"], ["predict", run_dir, "x.png"],
                 ["viz", "pos", run_dir], [*DIGITS, "--out", tmp_path / "r"]):  # fmt: skip
        code, _, err = cli([*argv, "--device", "cuda"])
        assert code == 2
        line = one_line(err)
        assert "--device 'cuda' is invalid" in line and "available: cpu" in line


def test_out_under_a_file_is_one_line(tmp_path: Path, cli, one_line) -> None:
    (tmp_path / "file").write_text("x")
    code, _, err = cli([*DIGITS, "--out", tmp_path / "file" / "run", *TINY, "--threads", "1"])
    assert code == 2
    assert "file" in one_line(err)


def test_training_errors_are_one_line(tmp_path: Path, monkeypatch, cli, one_line) -> None:
    """The trainer's own errors (here: a diverging run) reach the user as one line."""
    from tfam.training.errors import NonFiniteLossError
    from tfam.training.trainer import Trainer

    def diverge(self, resume=False):
        raise NonFiniteLossError("loss is nan at step 3: stopped; last good checkpoint kept")

    monkeypatch.setattr(Trainer, "fit", diverge)
    code, _, err = cli([*DIGITS, "--out", tmp_path / "r", *TINY, "--threads", "1"])
    assert code == 2
    assert "loss is nan at step 3" in one_line(err)

    # And an OSError that names a file (a full disk during a save, ...).
    def full_disk(self, resume=False):
        raise OSError(28, "No space left on device", str(tmp_path / "r" / "last.pt"))

    monkeypatch.setattr(Trainer, "fit", full_disk)
    code, _, err = cli([*DIGITS, "--out", tmp_path / "r2", *TINY, "--threads", "1"])
    assert code == 2
    line = one_line(err)
    assert "last.pt" in line and "No space left on device" in line
