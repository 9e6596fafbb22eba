"""What every study is: a claim of the source documents, the profiles it runs at, and one
``run`` that measures, records and reports.

A study subclasses :class:`Study` (``name``, ``title``, ``claim``, ``questions``, ``profiles``)
and writes two methods: :meth:`Study.measure`, which records each condition's numbers through
``ctx.once(key, fn)`` (appended to ``results.json`` as soon as they exist, so a crash loses at
most the condition that was running, and a rerun into the same folder skips what is done), and
:meth:`Study.report`, which reads those records back and gives the report's sections and a
conclusion computed from them. :meth:`Study.run` does the rest: the folder, the store, the
progress bars and ``report.md``.

    from tfam.studies import get_study
    get_study("positions").run("tiny", seeds=3, out_dir="runs/study-positions")
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TextIO

from tfam.fileio import atomic_write_bytes
from tfam.studies.jobs import (
    JOBS_DIR,
    merge_worker_records,
    run_workers,
    try_claim,
    worker_threads,
)

__all__ = [
    "PROFILES",
    "STUDIES",
    "Context",
    "Profile",
    "Progress",
    "ResultStore",
    "Section",
    "Study",
    "get_study",
    "register_study",
]

PROFILES = ("tiny", "quick", "full")
RESULTS = "results.json"
REPORT = "report.md"


@dataclass(frozen=True)
class Profile:
    """One scale of a study: its ``settings`` (what :meth:`Study.measure` reads), the time it
    is expected to take on a 2-core CPU (``expected``: what ``tfam study --list`` shows) and,
    where measured, what a run took (``measured``, with the machine)."""

    settings: dict[str, Any]
    expected: str
    measured: str = ""
    #: The settings that replace ``settings``' on a CUDA device (``--device cuda``: longer
    #: lengths); None when the profile runs on the CPU only.
    cuda: dict[str, Any] | None = None
    cuda_expected: str = ""


@dataclass
class Section:
    """A report section: a heading and its markdown body (tables, figure links, text)."""

    heading: str
    body: str


class ResultStore:
    """``results.json`` of one study run: the study, profile, seeds and every condition's
    record under its key, rewritten atomically after each record.

    A folder that holds another study's or another profile's results is refused in one line
    (mixing them would average unlike runs)."""

    def __init__(self, path: Path, study: str, profile: str, settings: dict[str, Any]) -> None:
        self.path = path
        self.data: dict[str, Any] = {
            "study": study,
            "profile": profile,
            "settings": settings,
            "records": {},
        }
        if path.exists():
            old = json.loads(path.read_text())
            if (old.get("study"), old.get("profile")) != (study, profile):
                raise ValueError(
                    f"{path} holds study {old.get('study')!r} at profile {old.get('profile')!r}; "
                    f"expected {study!r} at {profile!r}: use another --out, or the same "
                    "study and profile to finish that run"
                )
            if old.get("settings", settings) != settings:
                raise ValueError(
                    f"{path} was measured with other {profile!r} settings than this version of "
                    f"study {study!r} uses: use another --out (its records would not compare)"
                )
            self.data["records"] = old.get("records", {})

    @property
    def records(self) -> dict[str, Any]:
        return self.data["records"]

    def __contains__(self, key: str) -> bool:
        return key in self.records

    def get(self, key: str) -> Any:
        return self.records.get(key)

    def put(self, key: str, value: Any) -> None:
        self.records[key] = value
        self.save()

    def save(self, **extra: Any) -> None:
        self.data.update(extra)
        text = json.dumps(self.data, indent=1, sort_keys=False, default=_jsonable)
        atomic_write_bytes(self.path, (text + "\n").encode())


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


class Progress:
    """Progress bars on stderr (tqdm), one per stretch of work; ``enabled=False`` is silent."""

    def __init__(self, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.enabled = enabled
        self.stream = stream or sys.stderr

    @contextmanager
    def bar(self, total: int | None, label: str) -> Iterator[Callable[[str], None]]:
        """``with progress.bar(n, "training") as step: ... step("lstm n=4 seed 0")``;
        ``total=None``: a count without an end."""
        if not self.enabled:
            yield lambda desc="": None
            return
        from tqdm import tqdm

        with tqdm(total=total, desc=label, file=self.stream, leave=True, dynamic_ncols=True) as t:

            def step(desc: str = "") -> None:
                if desc:
                    t.set_postfix_str(desc, refresh=False)
                t.update(1)

            yield step


@dataclass
class Context:
    """What :meth:`Study.measure` and :meth:`Study.report` are given: the profile's name and
    settings, the seeds, the output folder, the store and the progress bars."""

    profile: str
    settings: dict[str, Any]
    seeds: list[int]
    out: Path
    store: ResultStore
    progress: Progress
    skipped: int = 0
    ran: int = 0
    device: str = "cpu"
    notes: list[str] = field(default_factory=list)
    claim: Callable[[str], bool] | None = None
    deferred: int = 0
    jobs: int = 1  # --jobs: how many worker processes computed the records

    def once(self, key: str, fn: Callable[[], Any]) -> Any:
        """The record under ``key``: read back when a previous run stored it, else computed by
        ``fn()`` and stored at once. In a ``--jobs`` worker (``claim`` set) a key another
        worker claimed first is left to it: None is returned."""
        if key in self.store:
            self.skipped += 1
            return self.store.get(key)
        if self.claim is not None and not self.claim(key):
            self.deferred += 1
            return None
        value = fn()
        self.store.put(key, value)
        self.ran += 1
        return value

    def figure(self, name: str) -> Path:
        """The path of figure ``name`` (a PNG in the output folder)."""
        return self.out / name


class Study:
    """A claim or question of the source documents, answered by a rerunnable experiment.

    ``claim``: one sentence, the documents' claim or question, naming the document it comes
    from (``004_*`` question 2); ``questions``: which of issue 25's claims and questions it
    answers; ``profiles``: ``tiny`` (seconds: CI), ``quick`` (≤ 10 minutes on a 2-core CPU)
    and ``full``."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    claim: ClassVar[str] = ""
    questions: ClassVar[tuple[str, ...]] = ()
    profiles: ClassVar[dict[str, Profile]] = {}
    default_seeds: ClassVar[int] = 3
    # True when records are independent runs that --jobs may compute in parallel processes
    # (not timings, which parallel work would disturb; measure() must not use once()'s value)
    parallel: ClassVar[bool] = False

    def setup(self, ctx: Context) -> str:
        """The report's setup paragraph (models, data, steps, machine)."""
        raise NotImplementedError

    def measure(self, ctx: Context) -> None:
        """Record every condition through ``ctx.once(key, fn)``."""
        raise NotImplementedError

    def report(self, ctx: Context) -> tuple[list[Section], list[str]]:
        """The report's sections and its conclusions (sentences computed from the records)."""
        raise NotImplementedError

    def settings_for(self, profile: str, device: str = "cpu") -> dict[str, Any]:
        """The settings ``profile`` runs with on ``device`` ("cpu", "cuda" or "cuda:N"): on
        CUDA the profile's ``cuda`` settings replace its own and ``device`` is recorded (so a
        folder never mixes CPU and CUDA records). Raises ValueError for an unknown profile,
        a malformed device, or CUDA on a profile that runs on the CPU only."""
        if profile not in self.profiles:
            raise ValueError(
                f"--profile {profile!r} is invalid for study {self.name!r}: expected one of "
                + ", ".join(self.profiles)
            )
        if not isinstance(device, str) or not re.fullmatch(r"cpu|cuda(:\d+)?", device):
            raise ValueError(f"--device {device!r} is invalid: expected cpu, cuda or cuda:N")
        settings = dict(self.profiles[profile].settings)
        if device == "cpu":
            return settings
        cuda = self.profiles[profile].cuda
        if cuda is None:
            ready = [n for n, c in sorted(STUDIES.items())
                     if any(p.cuda is not None for p in c.profiles.values())]  # fmt: skip
            raise ValueError(
                f"--device {device!r} is invalid for study {self.name!r} at profile "
                f"{profile!r}: it runs on the CPU only (studies with CUDA profiles: "
                + (", ".join(ready) or "none")
                + ")"
            )
        return {**settings, **cuda, "device": device}

    def run(
        self,
        profile: str = "tiny",
        seeds: int | None = None,
        out_dir: str | Path = ".",
        progress: Progress | None = None,
        device: str = "cpu",
        jobs: int = 1,
    ) -> dict[str, Any]:
        """Measure (skipping what ``out_dir/results.json`` already holds), then write
        ``results.json``, the figures and ``report.md``; returns results.json's content.
        ``device``: see :meth:`settings_for`; CUDA must be visible to torch. ``jobs`` > 1:
        the records are computed by that many worker processes first (:mod:`tfam.studies.jobs`;
        only for studies with ``parallel`` set)."""

        settings = self.settings_for(profile, device)
        n = self.default_seeds if seeds is None else seeds
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"--seeds {seeds!r} is invalid: expected an int >= 1")
        self.check_jobs(jobs)
        require_device(device)
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        store = ResultStore(out / RESULTS, self.name, profile, settings)
        progress = progress or Progress()
        start = time.perf_counter()
        merge_worker_records(out, store)  # what an interrupted --jobs run finished
        if jobs > 1:
            args = (type(self), profile, n, str(out), device)
            run_workers(self.name, run_worker, args, out, jobs, store, progress)
        ctx = Context(
            profile, settings, list(range(n)), out, store, progress, device=device, jobs=jobs
        )
        self.measure(ctx)
        sections, conclusions = self.report(ctx)
        seconds = time.perf_counter() - start
        store.save(seeds=ctx.seeds, conclusions=conclusions, seconds=round(seconds, 1))
        atomic_write_bytes(out / REPORT, self.render(ctx, sections, conclusions).encode())
        shutil.rmtree(out / JOBS_DIR, ignore_errors=True)  # merged: the workers' files are done
        return store.data

    def check_jobs(self, jobs: int) -> None:
        """Raise ValueError in one line for a ``--jobs`` this study cannot take."""
        if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
            raise ValueError(f"--jobs {jobs!r} is invalid: expected an int >= 1")
        if jobs > 1 and not self.parallel:
            ok = ", ".join(n for n, c in sorted(STUDIES.items()) if c.parallel)
            raise ValueError(
                f"--jobs {jobs} is invalid for study {self.name!r}: its records are timings "
                f"or depend on each other, so it runs one record at a time (--jobs 1); "
                f"studies that take --jobs: {ok}"
            )

    def render(self, ctx: Context, sections: list[Section], conclusions: list[str]) -> str:
        """report.md: the claim, the setup, the sections, the conclusions."""
        lines = [
            f"# {self.title}",
            "",
            f"**Claim.** {self.claim}",
            "",
            f"**Answers** (issue 25): {'; '.join(self.questions)}.",
            "",
            "## Setup",
            "",
            f"Profile `{ctx.profile}`, seeds {ctx.seeds[0]}..{ctx.seeds[-1]} "
            f"({len(ctx.seeds)}). " + self.setup(ctx),
            "",
            f"Command: `tfam study {self.name} --profile {ctx.profile} --seeds {len(ctx.seeds)} "
            + (f"--device {ctx.device} " if ctx.device != "cpu" else "")
            + (f"--jobs {ctx.jobs} " if ctx.jobs > 1 else "")
            + f"--out {ctx.out}`"
            + (
                f" (the records were trained by {ctx.jobs} worker processes of "
                f"{worker_threads(ctx.jobs)} torch thread(s) each; the machine line counts the "
                "threads of the process that wrote this report)"
                if ctx.jobs > 1
                else ""
            ),
            "",
        ]
        for s in sections:
            lines += [f"## {s.heading}", "", s.body.rstrip(), ""]
        lines += ["## Conclusion", ""]
        lines += [f"- {c}" for c in conclusions]
        lines += [""]
        lines += [
            "Means ± sample standard deviation over seeds; a difference counts only when it "
            "exceeds twice its standard error (tfam.studies.stats.compare).",
            "",
        ]
        lines += ctx.notes
        return "\n".join(lines).rstrip() + "\n"


STUDIES: dict[str, type[Study]] = {}


def run_worker(cls: type[Study], profile: str, seeds: int, out: str, device: str, index: int,
               threads: int) -> None:  # fmt: skip
    """One ``--jobs`` worker process (:mod:`tfam.studies.jobs`): the study's ``measure`` over
    the shared claims with ``threads`` torch threads, its records to
    ``DIR/.jobs/records-INDEX.json``, its output to ``DIR/.jobs/worker-INDEX.log``."""
    import torch

    torch.set_num_threads(threads)
    base = Path(out)
    study = cls()
    settings = study.settings_for(profile, device)
    main = ResultStore(base / RESULTS, study.name, profile, settings)
    mine = ResultStore(base / JOBS_DIR / f"records-{index}.json", study.name, profile, settings)
    for key, value in main.records.items():
        mine.records.setdefault(key, value)
    log = open(base / JOBS_DIR / f"worker-{index}.log", "a", buffering=1)  # noqa: SIM115
    sys.stdout = sys.stderr = log
    ctx = Context(profile, settings, list(range(seeds)), base, mine, Progress(enabled=False),
                  device=device, claim=lambda key: try_claim(base, key))  # fmt: skip
    study.measure(ctx)
    print(f"worker {index}: {ctx.ran} records computed, {ctx.deferred} left to other workers")


def require_device(device: str) -> None:
    """Raise ValueError in one line when this machine has no ``device`` (the trainer's check,
    :func:`tfam.training.devices.resolve_device`: CUDA visible to torch, the index present)."""
    from tfam.training.devices import resolve_device

    try:
        resolve_device(device)
    except ValueError as err:
        why = str(err).split(": ", 1)[-1]
        raise ValueError(
            f"--device {device!r} is invalid here: torch sees no CUDA device of that name ({why})"
        ) from None


def register_study(cls: type[Study]) -> type[Study]:
    """Class decorator: make ``cls`` runnable as ``tfam study <cls.name>``."""
    if not cls.name or not cls.claim or not cls.title:
        raise ValueError(f"{cls.__name__}: a study needs a name, a title and a claim")
    missing = [p for p in PROFILES if p not in cls.profiles]
    if missing:
        raise ValueError(f"{cls.__name__}: profiles {missing} are missing (need {PROFILES})")
    STUDIES[cls.name] = cls
    return cls


def get_study(name: str) -> Study:
    """The registered study ``name``; an unknown name is one line listing the valid ones."""
    if name not in STUDIES:
        raise ValueError(f"study {name!r} is unknown: expected one of {', '.join(sorted(STUDIES))}")
    return STUDIES[name]()


def md_table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> str:
    """A markdown table (cells as given, str() of each)."""
    head = list(header)
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)
