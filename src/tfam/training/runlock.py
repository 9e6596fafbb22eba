"""One training per run directory: an exclusive ``fcntl.flock`` on ``OUT/.tfam-train.lock``.

The kernel drops a flock when its process ends, however it ends (kill -9 included), so a lock
file left behind by a dead run never blocks the next one; only a live holder does. The file
itself stays (removing it would let a third process lock a file that is no longer the one the
second waits on).
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType

from tfam.training.errors import TrainingError

__all__ = ["LOCK_NAME", "RunLock", "RunLockedError"]

LOCK_NAME = ".tfam-train.lock"


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

    def release(self) -> None:
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
