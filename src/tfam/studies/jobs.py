"""``tfam study NAME --jobs N``: a study's records computed by N worker processes.

Each worker (:func:`tfam.studies.base.run_worker`) runs the study's own
:meth:`~tfam.studies.base.Study.measure` with the same settings, so it walks the same keys in
the same order; ``ctx.once`` computes a key only when the
worker wins its claim (a file created with ``O_EXCL`` under ``DIR/.jobs/claims``), so the N
workers share the keys dynamically, the next free one to whoever is free. A worker writes its
records to ``DIR/.jobs/records-I.json`` as each finishes (a crash loses at most the records
that were running); the parent merges them into ``results.json`` and then runs the study as
usual, which finds every record and writes the report (and computes serially anything a worker
left undone). A record is seeded by its seed alone, so the process that ran it does not change
it; only wall-clock fields (``train_seconds``) feel the sharing.

Studies whose records are timings (``flash``, ``long-sequences``' steps/s) set
``Study.parallel = False``: parallel workers would disturb what they measure.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["JOBS_DIR", "merge_worker_records", "run_workers", "worker_threads"]

JOBS_DIR = ".jobs"


def worker_threads(jobs: int) -> int:
    """Torch threads per worker: the cores shared out, at least one each."""
    return max(1, (os.cpu_count() or 1) // jobs)


def claim_path(out: Path, key: str) -> Path:
    """The claim file of record ``key`` (hashed: keys hold '/' and '=')."""
    return out / JOBS_DIR / "claims" / hashlib.sha1(key.encode()).hexdigest()


def try_claim(out: Path, key: str) -> bool:
    """True for the one process that creates ``key``'s claim first."""
    try:
        fd = os.open(claim_path(out, key), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(fd, f"{os.getpid()} {key}\n".encode())
    os.close(fd)
    return True


def merge_worker_records(out: Path, store: Any) -> int:
    """Copy the records of every ``DIR/.jobs/records-*.json`` that ``store`` lacks into it
    (saved once); returns how many were added. Files of another study or profile are refused
    as ResultStore refuses them."""
    added = 0
    for path in sorted((out / JOBS_DIR).glob("records-*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a worker killed mid-write leaves its previous file (atomic writes)
        if (data.get("study"), data.get("profile"), data.get("settings")) != (
            store.data["study"],
            store.data["profile"],
            store.data["settings"],
        ):
            raise ValueError(
                f"{path} holds records of another study, profile or settings: remove "
                f"{out / JOBS_DIR} or use another --out"
            )
        for key, value in data.get("records", {}).items():
            if key not in store:
                store.records[key] = value
                added += 1
    if added:
        store.save()
    return added


def run_workers(name: str, worker: Callable[..., None], args: tuple[Any, ...], out: Path,
                jobs: int, store: Any, progress: Any) -> None:  # fmt: skip
    """Run ``jobs`` processes of ``worker(*args, index, threads)`` (a module-level function,
    spawned) over study ``name``'s records in ``out``, show their progress, and merge their
    records into ``store``. A worker that fails is reported in one line naming its log (after
    its finished records are merged, so a rerun resumes)."""
    work = out / JOBS_DIR
    shutil.rmtree(work / "claims", ignore_errors=True)  # claims live for one run only
    (work / "claims").mkdir(parents=True)  # done records need none: workers read them first
    threads = worker_threads(jobs)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=worker, args=(*args, i, threads)) for i in range(jobs)]
    for p in procs:
        p.start()
    done_before = len(store.records)
    try:
        with progress.bar(None, f"{name}: {jobs} jobs x {threads} thread(s)") as step:
            seen = done_before
            while any(p.is_alive() for p in procs):
                time.sleep(1.0)
                now = _count_records(work, store)
                for _ in range(now - seen):
                    step("")
                seen = max(seen, now)
    except BaseException:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join()
        merge_worker_records(out, store)
        raise
    merge_worker_records(out, store)
    failed = [i for i, p in enumerate(procs) if p.exitcode != 0]
    if failed:
        logs = ", ".join(str(work / f"worker-{i}.log") for i in failed)
        raise RuntimeError(
            f"study {name}: worker(s) {failed} failed (see {logs}); the records they "
            "finished are in results.json, so the same command resumes"
        )


def _count_records(work: Path, store: Any) -> int:
    keys = set(store.records)
    for path in work.glob("records-*.json"):
        try:
            keys.update(json.loads(path.read_text()).get("records", {}))
        except (OSError, ValueError):
            pass
    return len(keys)
