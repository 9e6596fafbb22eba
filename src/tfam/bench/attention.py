"""The attention complexity lab: time and peak memory of each kernel against the length.

A sweep (:func:`run_sweep`) measures every kernel of :class:`BenchSpec` at every length, one
**point** at a time, each in a fresh child process (:mod:`tfam.bench.child`):

- the child imports torch and tfam (every registered kernel, plug-ins included), says it is
  ready, and only then does the point's time budget start; past it the child is killed and the
  point is ``timeout``;
- an out-of-memory error in the child (or the child killed by the system, SIGKILL) is ``oom``,
  any other failure ``error: <one line>``;
- before a child is started, the point's memory (:func:`estimate_bytes`, from the kernel's
  ``cost()``) is compared with what the device has free (:func:`available_bytes`); a point that
  needs more is ``skipped (needs ~X GB, Y GB free)`` and never attempted, as is every longer
  length of a kernel after its ``timeout`` or ``oom`` (it would only take longer, or more).

A point's time is the median of ``repeat`` calls (forward, or forward and backward); its peak
memory is what the first call added over what the process held just before it (q, k, v
excluded): on CPU the rise of the peak resident set (``VmHWM``, reset right before the call
through ``/proc/self/clear_refs``; else ``ru_maxrss``), on CUDA
``torch.cuda.max_memory_allocated``. A fresh child per point makes that peak the point's own.
The slopes (:func:`add_slopes`) are d log(value) / d log(length) between successive lengths:
~1 for linear memory, ~2 for the (L x L) scores.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tfam.config import ATTENTION_KERNELS, config_error
from tfam.fileio import atomic_write_bytes
from tfam.layers.kernels import AttentionKernel, build_kernel

# Bytes per element of the dtypes a sweep may use.
DTYPES: dict[str, int] = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2}
# Seconds a child may take to import torch and tfam before its budget starts.
STARTUP_LIMIT = 300.0
OK = "ok"
CSV_COLUMNS = (
    "kernel",
    "length",
    "ms",
    "ms_slope",
    "peak_mb",
    "mb_slope",
    "estimate_mb",
    "calls",
    "status",
)


def parse_kernels(text: str, field: str = "kernels") -> tuple[str, ...]:
    """'math,sdpa' -> ('math', 'sdpa'): registered kernel names, each once."""
    names = tuple(n.strip() for n in str(text).split(","))
    registered = ", ".join(sorted(ATTENTION_KERNELS))
    for name in names:
        if not name:
            raise config_error(field, text, f"expected kernel names separated by commas, e.g. "
                               f"math,sdpa; registered kernels: {registered}")  # fmt: skip
        if name not in ATTENTION_KERNELS:
            raise config_error(
                field, text, f"unknown kernel {name!r}; registered kernels: {registered}"
            )
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise config_error(field, text, f"{', '.join(map(repr, twice))} named twice")
    return names


def parse_lengths(text: str, field: str = "lengths") -> tuple[int, ...]:
    """'4096,1024' -> (1024, 4096): positive ints, each once, in increasing order."""
    valid = "expected positive integers separated by commas, e.g. 1024,4096,16384"
    try:
        lengths = [int(n) for n in str(text).split(",")]
    except ValueError:
        raise config_error(field, text, valid) from None
    if not lengths or min(lengths) < 1:
        raise config_error(field, text, valid)
    if len(set(lengths)) != len(lengths):
        raise config_error(field, text, "each length once")
    return tuple(sorted(lengths))


@dataclasses.dataclass(frozen=True)
class BenchSpec:
    """What a sweep measures: q, k, v of (batch, heads, length, head_dim) in ``dtype`` on
    ``device`` ("cpu", "cuda", "cuda:N"), self-attention (Lq = Lk), optionally causal; the
    forward alone or forward and backward; ``repeat`` calls per point within ``time_budget``
    seconds; ``threads`` CPU threads in each child."""

    kernels: tuple[str, ...]
    lengths: tuple[int, ...]
    backward: bool = False
    heads: int = 1
    head_dim: int = 64
    batch: int = 1
    causal: bool = False
    dtype: str = "float32"
    device: str = "cpu"
    repeat: int = 3
    time_budget: float = 60.0
    threads: int = 1

    def __post_init__(self) -> None:
        parse_kernels(",".join(self.kernels))
        parse_lengths(",".join(map(str, self.lengths)))
        for name in ("heads", "head_dim", "batch", "repeat", "threads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise config_error(name, value, "expected an int >= 1")
        if self.dtype not in DTYPES:
            raise config_error("dtype", self.dtype, f"expected one of {', '.join(DTYPES)}")
        budget = self.time_budget
        if isinstance(budget, bool) or not isinstance(budget, int | float) or not budget > 0:
            raise config_error("time_budget", budget, "expected a positive number of seconds")
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise config_error("device", self.device, "expected cpu, cuda or cuda:N")

    @property
    def pass_name(self) -> str:
        return "forward+backward" if self.backward else "forward"


@dataclasses.dataclass
class Point:
    """One kernel at one length: ``status`` is ``ok``, ``timeout``, ``oom``,
    ``error: <line>`` or ``skipped (<why>)``; ``ms`` (median per call) and ``peak_mb`` only
    when ok; ``estimate_mb`` what :func:`estimate_bytes` expected; ``calls`` how many calls
    were timed (fewer than asked when the budget allowed no more)."""

    kernel: str
    length: int
    status: str
    estimate_mb: float
    ms: float | None = None
    peak_mb: float | None = None
    calls: int = 0
    ms_slope: float | None = None
    mb_slope: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def mark(self) -> str:
        """The status's first word, for a plot's marks: timeout, oom, error, skipped."""
        return self.status.split(":")[0].split(" ")[0]


# ------------------------------------------------------------------------------- estimates


def estimate_bytes(kernel: AttentionKernel, spec: BenchSpec, length: int) -> int:
    """The memory one point needs, from the kernel's ``cost()``: its score entries held at
    once (in at least float32, as softmax runs) for each of B x H heads, twice with backward
    (the scores' gradient beside them), plus q, k, v and the output (and their four gradients
    with backward) in ``spec.dtype``."""
    cost = kernel.cost(length, length, spec.head_dim, is_causal=spec.causal)
    item = DTYPES[spec.dtype]
    heads = spec.batch * spec.heads
    scores = cost.score_elements * max(item, 4) * heads
    tensors = 4 * heads * length * spec.head_dim * item
    factor = 2 if spec.backward else 1
    return factor * (scores + tensors)


def available_bytes(device: str) -> int | None:
    """Memory free for a new point: on CPU the system's available RAM (psutil when installed,
    else MemAvailable of /proc/meminfo), on CUDA the device's free memory; None when unknown."""
    if device.startswith("cuda"):
        import torch

        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    try:
        import psutil  # type: ignore[import-not-found]

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _size(n: float) -> str:
    """Bytes as '~3.2 GB' or '~120 MB' (decimal units, as the table's MB)."""
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


# ----------------------------------------------------------------------------------- slopes


def _slope(a: tuple[int, float | None], b: tuple[int, float | None]) -> float | None:
    """d log(value) / d log(length) between two (length, value) points; None when a value is
    missing or not positive."""
    (n0, v0), (n1, v1) = a, b
    if v0 is None or v1 is None or v0 <= 0 or v1 <= 0:
        return None
    return math.log(v1 / v0) / math.log(n1 / n0)


def add_slopes(points: Sequence[Point]) -> None:
    """Set each ok point's ``ms_slope`` and ``mb_slope``: the log-log slope from the kernel's
    previous length (when that point was ok too)."""
    last: dict[str, Point] = {}
    for p in sorted(points, key=lambda p: (p.kernel, p.length)):
        prev = last.get(p.kernel)
        if p.ok and prev is not None and prev.ok:
            p.ms_slope = _slope((prev.length, prev.ms), (p.length, p.ms))
            p.mb_slope = _slope((prev.length, prev.peak_mb), (p.length, p.peak_mb))
        last[p.kernel] = p


# --------------------------------------------------------------------------- table and CSV


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _rows(points: Sequence[Point]) -> list[tuple[str, ...]]:
    return [
        (
            p.kernel,
            str(p.length),
            _num(p.ms, 2),
            _num(p.ms_slope, 2),
            _num(p.peak_mb, 1),
            _num(p.mb_slope, 2),
            _num(p.estimate_mb, 2),
            str(p.calls),
            p.status,
        )
        for p in points
    ]


def format_table(points: Sequence[Point]) -> str:
    """Aligned columns: kernel, length, ms, ms slope, peak MB, MB slope, estimate MB, calls,
    status (numbers right-aligned)."""
    head = ("kernel", "length", "ms", "ms slope", "peak MB", "MB slope", "est. MB", "calls",
            "status")  # fmt: skip
    body = _rows(points)
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    left = {0, len(head) - 1}

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    return "\n".join([line(head), "  ".join("-" * w for w in widths), *map(line, body)])


def write_csv(points: Sequence[Point], path: str | Path) -> Path:
    """The points as CSV (:data:`CSV_COLUMNS`; empty cells where there is no number), written
    atomically, so a sweep rewriting it after each point never leaves half a file."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in _rows(points):
        writer.writerow(["" if cell == "-" else cell for cell in row])
    return atomic_write_bytes(path, buf.getvalue().encode())


# ---------------------------------------------------------------------------------- running


def _child_env(spec: BenchSpec) -> dict[str, str]:
    """The child's environment: this tfam first on its path (the one that runs the sweep,
    wherever it is installed) and its CPU threads."""
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])])
    env["OMP_NUM_THREADS"] = str(spec.threads)
    return env


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _read_line(proc: subprocess.Popen, deadline: float) -> str | None:
    """The child's next stdout line, or None if the deadline passes (or stdout closes) first."""
    assert proc.stdout is not None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if ready:
            line = proc.stdout.readline()
            return line or None


def run_point(spec: BenchSpec, kernel: str, length: int, estimate_mb: float) -> Point:
    """Measure ``kernel`` at ``length`` in a fresh child process under ``spec.time_budget``
    seconds (counted from the child's "ready", after its imports)."""
    request = {**dataclasses.asdict(spec), "kernel": kernel, "length": length}
    cmd = [sys.executable, "-m", "tfam.bench.child", json.dumps(request)]
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=_child_env(spec)
        )
        status, result = "", None
        try:
            if _read_line(proc, time.monotonic() + STARTUP_LIMIT) is None:
                status = f"error: the child did not start within {STARTUP_LIMIT:.0f} s"
            else:
                line = _read_line(proc, time.monotonic() + spec.time_budget)
                if line is None and proc.poll() is None:
                    status = "timeout"
                elif line is not None:
                    result = json.loads(line)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        err.seek(0)
        stderr = err.read()
    if result is not None:
        return Point(kernel, length, result["status"], estimate_mb, result.get("ms"),
                     result.get("peak_mb"), result.get("calls", 0))  # fmt: skip
    if not status:
        # The child died without a result: killed by the system (SIGKILL: the OOM killer, as
        # the budget's kill is ours and said above) or crashed.
        if proc.returncode == -9:
            status = "oom"
        else:
            why = _last_line(stderr) or f"exit code {proc.returncode}"
            status = f"error: {why}"
    return Point(kernel, length, status, estimate_mb)


Launch = Callable[[BenchSpec, str, int, float], Point]


def run_sweep(
    spec: BenchSpec,
    on_point: Callable[[Point, int, int], None] | None = None,
    launch: Launch | None = None,
    free: Callable[[str], int | None] | None = None,
) -> list[Point]:
    """Every kernel at every length (shortest first, the kernels side by side), each point by
    ``launch`` (a child process) unless skipped; ``on_point(point, i, n)`` after each of the n
    points; ``free(device)`` the bytes free (default :func:`available_bytes`), asked before
    each point. Returns the points, kernel by kernel, with their slopes."""
    launch = launch or run_point
    free = free or available_bytes
    points: list[Point] = []
    stopped: dict[str, Point] = {}  # kernel -> its point that ran out of time or memory
    total = len(spec.kernels) * len(spec.lengths)
    for length in spec.lengths:
        for name in spec.kernels:
            kernel = build_kernel(name)
            need = estimate_bytes(kernel, spec, length)
            refusal = kernel.refusal("causal") if spec.causal else None
            if refusal is not None:
                point = Point(name, length, f"error: {refusal}", need / 1e6)
            elif name in stopped:
                prev = stopped[name]
                point = Point(name, length, f"skipped ({prev.status} at {prev.length})", need / 1e6)
            elif (have := free(spec.device)) is not None and need > have:
                why = f"skipped (needs ~{_size(need)}, {_size(have)} free)"
                point = Point(name, length, why, need / 1e6)
            else:
                point = launch(spec, name, length, need / 1e6)
                if point.status in ("timeout", "oom"):
                    stopped[name] = point
            points.append(point)
            if on_point is not None:
                on_point(point, len(points), total)
    points.sort(key=lambda p: (spec.kernels.index(p.kernel), p.length))
    add_slopes(points)
    return points


def progress_line(point: Point, i: int, n: int, spec: BenchSpec) -> str:
    """One stderr line per point: '[3/10] sdpa L=4096 forward+backward: 12.3 ms, 4.1 MB'."""
    where = f"[{i}/{n}] {point.kernel} L={point.length} {spec.pass_name}"
    if not point.ok:
        return f"{where}: {point.status}"
    return f"{where}: {point.ms:.2f} ms, peak {point.peak_mb:.1f} MB ({point.calls} calls)"


def write_results(points: Sequence[Point], out: str | Path) -> Path:
    """DIR/attention.csv (the folder made when missing)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    return write_csv(points, out / "attention.csv")


__all__ = [
    "BenchSpec",
    "CSV_COLUMNS",
    "DTYPES",
    "Point",
    "add_slopes",
    "available_bytes",
    "estimate_bytes",
    "format_table",
    "parse_kernels",
    "parse_lengths",
    "progress_line",
    "run_point",
    "run_sweep",
    "write_csv",
    "write_results",
]
