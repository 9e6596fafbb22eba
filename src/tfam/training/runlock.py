"""One training per run directory: an exclusive ``fcntl.flock`` on ``OUT/.tfam-train.lock``.

The kernel drops a flock when its process ends, however it ends (kill -9 included), so a lock
file left behind by a dead run never blocks the next one; only a live holder does. The file
itself stays (removing it would let a third process lock a file that is no longer the one the
second waits on).

A flock belongs to the open file description, which a fork shares: a DataLoader worker (forked,
not exec'd, so O_CLOEXEC does not help) would hold the trainer's lock until it noticed its
parent had died (seconds after a kill -9), and an immediate ``--resume`` would be refused naming
the dead trainer. So every forked child closes its copy of the descriptor at once (an
``os.register_at_fork`` hook): the lock lives and dies with the process that took it. Closing a
copy never unlocks (only LOCK_UN or the last close does), so the holder keeps its lock.
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from types import TracebackType

from tfam.training.errors import TrainingError

__all__ = ["LOCK_NAME", "RunLock", "RunLockedError"]

LOCK_NAME = ".tfam-train.lock"


# The locks this process holds; a forked child closes their descriptors (see the module).
_HELD: weakref.WeakSet[RunLock] = weakref.WeakSet()


def _close_in_child() -> None:
    for lock in list(_HELD):
        if lock._fd is not None:
            try:
                os.close(lock._fd)
            except OSError:
                pass
            lock._fd = None
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_in_child)


class RunLockedError(TrainingError):
    """Another live process is training into the same run directory."""


class RunLock:
    """``with RunLock(out_dir): ...`` holds the directory's training lock (non-blocking)."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.path = Path(directory) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            import fcntl
        except ImportError:  # Windows: no flock; one run per directory is then up to the user
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = ""
            try:
                holder = os.read(fd, 64).decode(errors="replace").strip()
            except OSError:
                pass
            os.close(fd)
            who = f" (pid {holder})" if holder.isdigit() else ""
            raise RunLockedError(
                f"out_dir {self.path.parent} is in use by another training{who}: two runs "
                "into one directory would overwrite each other; wait for it to finish or "
                "choose another output directory"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        _HELD.add(self)

    def release(self) -> None:
        _HELD.discard(self)
        if self._fd is None:
            return
        import fcntl

        try:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
