"""`tfam bench attention`: a tiny sweep writes its table, CSV and PNG; a point past its time
budget is "timeout", one whose estimate exceeds the free memory "skipped" without a child; bad
options are one error line. Each measured point starts a child process that imports torch (a
few seconds), so only two runs here start any."""

from __future__ import annotations

import csv
import subprocess
from pathlib import Path

import pytest

import tfam.bench.attention as bench
import tfam.cli
from tfam.bench import BenchSpec, Point, add_slopes, estimate_bytes
from tfam.layers.kernels import KERNELS, build_kernel
from tfam.viz.complexity import plot_complexity

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_a_tiny_sweep_writes_table_csv_and_png(cli, tmp_path: Path) -> None:
    out = tmp_path / "bench"
    code, stdout, stderr = cli(["bench", "attention", "--kernels", "math,sdpa", "--lengths",
                                "32,16", "--repeat", "1", "--out", out])  # fmt: skip
    assert code == 0, stderr
    rows = read_csv(out / "attention.csv")
    assert [(r["kernel"], r["length"], r["status"]) for r in rows] == [
        ("math", "16", "ok"), ("math", "32", "ok"), ("sdpa", "16", "ok"), ("sdpa", "32", "ok"),
    ]  # fmt: skip
    for r in rows:
        assert float(r["ms"]) > 0 and float(r["peak_mb"]) >= 0 and r["calls"] == "1"
        assert float(r["estimate_mb"]) > 0
    assert rows[0]["ms_slope"] == "" and rows[1]["ms_slope"] != ""  # from the previous length
    assert (out / "attention.png").read_bytes()[:8] == PNG_MAGIC
    assert "kernel" in stdout and "status" in stdout and stdout.count(" ok") == 4
    progress = [ln for ln in stderr.splitlines() if ln.startswith("[")]
    assert len(progress) == 4 and progress[-1].startswith("[4/4] sdpa L=32 forward")


def test_a_point_past_its_budget_is_a_timeout_and_the_longer_ones_are_skipped(
    cli, tmp_path: Path
) -> None:
    out = tmp_path / "slow"
    started: list[int] = []
    real = bench.run_point

    def counted(spec, kernel, length, estimate):  # noqa: ANN001, ANN202
        started.append(length)
        return real(spec, kernel, length, estimate)

    bench_run = pytest.MonkeyPatch()
    bench_run.setattr(bench, "run_point", counted)
    try:
        code, stdout, stderr = cli(["bench", "attention", "--kernels", "math", "--lengths",
                                    "768,1024", "--backward", "--time-budget", "0.001",
                                    "--out", out])  # fmt: skip
    finally:
        bench_run.undo()
    assert code == 0, stderr
    rows = read_csv(out / "attention.csv")
    assert [r["status"] for r in rows] == ["timeout", "skipped (timeout at 768)"]
    assert rows[0]["ms"] == "" and rows[0]["peak_mb"] == ""
    assert started == [768]  # the longer length was not attempted
    assert "timeout" in stdout and (out / "attention.png").exists()


def test_a_point_over_the_free_memory_is_skipped_without_a_child(
    cli, tmp_path: Path, monkeypatch
) -> None:
    def no_child(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("a child process was started")

    monkeypatch.setattr(subprocess, "Popen", no_child)
    code, stdout, stderr = cli(["bench", "attention", "--kernels", "math,sdpa", "--lengths",
                                "3000000,4000000", "--out", tmp_path])  # fmt: skip
    assert code == 0, stderr
    rows = read_csv(tmp_path / "attention.csv")
    assert len(rows) == 4
    for r in rows:
        assert r["status"].startswith("skipped (needs ~") and r["status"].endswith(" free)")
    # 3,000,000^2 float32 scores (36,000 GB) and q, k, v, out (4 x 3e6 x 64 x 4 B = 3.1 GB).
    assert "needs ~36003.1 GB" in rows[0]["status"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--kernels", "math,nope"], "--kernels 'math,nope' is invalid: unknown kernel 'nope'"),
        (["--kernels", "math,,sdpa"], "--kernels 'math,,sdpa' is invalid: expected kernel"),
        (["--lengths", "1024,x"], "--lengths '1024,x' is invalid: expected positive integers"),
        (["--lengths", "0,16"], "--lengths '0,16' is invalid"),
        (["--time-budget", "0"], "--time-budget 0.0 is invalid: expected a positive number"),
        (["--heads", "two"], "--heads 'two' is invalid: expected an int >= 1"),
        (["--dtype", "int8"], "--dtype 'int8' is invalid: expected one of float32"),
        (["--device", "tpu"], "--device 'tpu' is invalid"),
    ],
)
def test_bad_options_are_one_line(cli, one_line, args, expected) -> None:
    code, _, err = cli(["bench", "attention", "--lengths", "16", *args])
    assert code == 2
    assert one_line(err).startswith(f"tfam: error: {expected}")
    if "nope" in expected:  # the registered kernels are listed
        assert ", ".join(sorted(KERNELS)) in err


def test_help_shows_examples(capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        tfam.cli.main(["bench", "attention", "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "tfam bench attention --kernels math,sdpa,chunked" in out


def test_slopes_estimates_and_the_plot_marks() -> None:
    points = [Point("math", n, "ok", 1.0, ms=n**2 / 1e3, peak_mb=n / 10) for n in (64, 128, 256)]
    points.append(Point("math", 512, "timeout", 1.0))
    add_slopes(points)
    assert points[0].ms_slope is None
    assert points[2].ms_slope == pytest.approx(2.0) and points[2].mb_slope == pytest.approx(1.0)
    assert points[3].ms_slope is None
    spec = BenchSpec(kernels=("math", "chunked"), lengths=(1024, 2048), backward=True)
    # Scores (float32) from cost(), q, k, v, out; twice with backward (their gradients).
    tensors = 4 * 2048 * 64 * 4
    assert estimate_bytes(build_kernel("math"), spec, 2048) == 2 * (2048 * 2048 * 4 + tensors)
    assert estimate_bytes(build_kernel("chunked"), spec, 2048) == 2 * (512 * 512 * 4 + tensors)
    fig = plot_complexity(points)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert texts.count("math: timeout") == 2  # both panels
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert labels == ["math", "∝ n", "∝ n²"]
