"""The long-sequence lab at its tiny profile: two kernels train, rows and the figure."""

from __future__ import annotations

import dataclasses

from tfam.bench.long_sequences import PROFILES, format_table, run, summarize
from tfam.viz.tradeoff import plot_tradeoff


def test_tiny_lab_runs_two_kernels(tmp_path) -> None:  # noqa: ANN001
    profile = dataclasses.replace(PROFILES["tiny"], steps=2)
    rows = run(profile, kernels=["sdpa", "linear"], tasks=["listops", "pathfinder32"])
    assert [(r["task"], r["kernel"]) for r in rows] == [
        ("listops", "sdpa"), ("listops", "linear"),
        ("pathfinder32", "sdpa"), ("pathfinder32", "linear"),
    ]  # fmt: skip
    for r in rows:
        assert r["status"] == "ok", r["status"]
        assert 0.0 <= r["accuracy"] <= 1.0 and r["steps_per_s"] > 0 and r["peak_mb"] >= 0
    assert rows[2]["length"] == 1 + 16 * 16
    # the same seed gives the same training: one kernel's two runs agree
    again = run(profile, kernels=["sdpa"], tasks=["listops"])[0]
    assert again["final_loss"] == rows[0]["final_loss"]
    refused = {**rows[0], "kernel": "x", "status": "refused: attention='x' refuses a mask"}
    summary = summarize([*rows, refused])
    assert summary[-1] == {"task": "listops", "kernel": "x", "seeds": 0,
                           "status": refused["status"]}  # fmt: skip
    table = format_table([*rows, refused])
    assert "linear" in table and "refuses a mask" in table
    plot_tradeoff(summary, tmp_path / "scatter.png")
    assert (tmp_path / "scatter.png").stat().st_size > 1000
