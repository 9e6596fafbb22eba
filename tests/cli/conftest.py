"""Shared helpers of the command-line tests: tiny image folders and one-line error checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import tfam.cli

# Three classes a tiny ViT can tell apart: bright top rows, bright left columns, a bright centre.
PATTERNS = {
    "bars": lambda a: a.__setitem__((slice(0, 3), slice(None)), 230),
    "columns": lambda a: a.__setitem__((slice(None), slice(0, 3)), 230),
    "spot": lambda a: a.__setitem__((slice(2, 6), slice(2, 6)), 230),
}


def write_image_folder(root: Path, per_class: int = 6, size: int = 8, seed: int = 0) -> Path:
    """root/<class>/<i>.png: grey 8x8 PNGs of three classes, with a little noise."""
    rng = np.random.default_rng(seed)
    for name, draw in PATTERNS.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            a = rng.integers(0, 40, (size, size)).astype(np.uint8)
            draw(a)
            Image.fromarray(a, mode="L").save(root / name / f"{i:03d}.png")
    return root


@pytest.fixture
def image_folder(tmp_path: Path) -> Path:
    return write_image_folder(tmp_path / "shapes")


@pytest.fixture
def cli(capsys):
    """Run `tfam ARGS` in-process: (exit code, stdout, stderr)."""

    def run(argv: list[str]) -> tuple[int, str, str]:
        code = tfam.cli.main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def one_line():
    """one_line(stderr) -> the single `tfam: error: ...` line (see :func:`one_line_error`)."""
    return one_line_error


def one_line_error(err: str) -> str:
    """The single `tfam: error: ...` line of stderr (asserting there is exactly one, and no
    traceback)."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("tfam: error: "), err
    assert "Traceback" not in err
    return lines[0]
