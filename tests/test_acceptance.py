"""Issue-level acceptance checks that take minutes: `make slow` (pytest -m slow) runs them."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tfam.cli import main
from tfam.data import get_dataset


@pytest.mark.slow
def test_digits_default_run_reaches_98_percent(tmp_path: Path) -> None:
    """The README's main job: `tfam train vit --data digits` ends at >= 98% test accuracy."""
    out = tmp_path / "digits"
    assert main(["train", "vit", "--data", "digits", "--out", str(out), "--quiet"]) == 0
    with (out / "metrics.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == get_dataset("digits").recipe.train["epochs"]
    # The test split is scored once, at the end (the per-epoch rows are on the validation split).
    results = json.loads((out / "results.json").read_text())
    assert results["test"]["acc"] >= 0.98
