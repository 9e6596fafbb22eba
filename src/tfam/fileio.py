"""Durable file writes: nothing half-written survives a crash or a full disk.

Like :mod:`tfam.config`, this module imports nothing of tfam, so every layer may use it.
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(directory: str | os.PathLike) -> None:
    """Make a rename inside ``directory`` durable (not every platform can open a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically: temp file in the same directory, flush, fsync,
    ``os.replace``, fsync the directory. On any failure the old file (if any) is untouched and
    the temp file is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


__all__ = ["atomic_write_bytes", "fsync_dir"]
