"""Checkpoints that survive a kill at any instant and are checked before they are trusted.

A checkpoint file is one self-describing file:

    b"TFAMCKPT1\\n"                                   magic and format version
    {"sha256": "...", "length": N, ...}\\n            JSON header, one line
    <N bytes: torch.save of the state dict>           payload

Writing is atomic: the bytes go to a temporary file in the same directory, which is flushed
and fsync'ed, then ``os.replace``d over the destination, and the directory is fsync'ed so the
rename itself is durable. A crash leaves either the old file or the new one, never half of one.

The directory keeps two generations, ``last.pt`` and ``prev.pt``. Reading verifies the magic,
the length and the SHA-256 of the payload; a file that fails raises :class:`CheckpointError`
naming the file and what is wrong. :func:`load_latest` falls back from a bad ``last.pt`` to
``prev.pt`` with a warning, and moves the bad file aside (``last.pt.corrupt``) so the next save
does not rotate it into ``prev.pt``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import warnings
from pathlib import Path
from typing import Any

import torch

from tfam.fileio import atomic_write_bytes, fsync_dir

__all__ = [
    "LAST",
    "PREV",
    "CheckpointError",
    "CheckpointWarning",
    "atomic_write_bytes",
    "find_checkpoint",
    "load_latest",
    "read_checkpoint",
    "save_checkpoint",
]

MAGIC = b"TFAMCKPT1\n"
LAST = "last.pt"
PREV = "prev.pt"


class CheckpointError(ValueError):
    """A checkpoint file is missing, truncated, corrupted or not a tfam checkpoint."""


class CheckpointWarning(UserWarning):
    """A bad checkpoint was skipped in favour of an older good one."""


def encode_checkpoint(state: dict[str, Any], **header: Any) -> bytes:
    """The bytes of a checkpoint file holding ``state`` (header: extra JSON-able facts)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    head = {"sha256": hashlib.sha256(payload).hexdigest(), "length": len(payload), **header}
    return MAGIC + json.dumps(head, sort_keys=True).encode() + b"\n" + payload


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Verify and load a checkpoint file; :class:`CheckpointError` names the file and the fault."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    data = path.read_bytes()
    if not data.startswith(MAGIC):
        what = "is empty" if not data else "does not start with the tfam checkpoint header"
        raise CheckpointError(f"checkpoint {path} is corrupt: the file {what}")
    end = data.find(b"\n", len(MAGIC))
    try:
        if end < 0:
            raise ValueError("no end of header line")
        head = json.loads(data[len(MAGIC) : end])
        expected_len, expected_sha = int(head["length"]), str(head["sha256"])
    except (ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"checkpoint {path} is corrupt: unreadable header ({err})") from None
    payload = data[end + 1 :]
    if len(payload) != expected_len:
        raise CheckpointError(
            f"checkpoint {path} is truncated or corrupt: payload is {len(payload)} bytes, "
            f"the header says {expected_len}"
        )
    if hashlib.sha256(payload).hexdigest() != expected_sha:
        raise CheckpointError(
            f"checkpoint {path} is corrupt: SHA-256 of the payload does not match its header"
        )
    try:
        # weights_only: the state holds only tensors and plain Python values (see Trainer).
        return torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001  (any unpickling failure means a bad file)
        raise CheckpointError(f"checkpoint {path} could not be loaded: {err}") from err


def save_checkpoint(state: dict[str, Any], directory: str | os.PathLike, **header: Any) -> Path:
    """Write ``state`` as ``directory/last.pt``, keeping the former ``last.pt`` as ``prev.pt``.

    Order of operations (each step atomic): write + fsync the new file under a temporary
    name; rename last.pt -> prev.pt; rename the new file -> last.pt; fsync the directory.
    A kill at any point leaves at least one complete, verifiable checkpoint.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    last, prev = directory / LAST, directory / PREV
    tmp = directory / f".{LAST}.tmp-{os.getpid()}"
    data = encode_checkpoint(state, **header)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if last.exists():
            os.replace(last, prev)
        os.replace(tmp, last)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(directory)
    return last


def find_checkpoint(directory: str | os.PathLike) -> Path | None:
    """``last.pt`` or ``prev.pt`` in ``directory`` if one exists (unverified), else None."""
    directory = Path(directory)
    for name in (LAST, PREV):
        if (directory / name).is_file():
            return directory / name
    return None


def load_latest(directory: str | os.PathLike) -> tuple[dict[str, Any], Path] | None:
    """The newest good checkpoint in ``directory`` and its path; None if there is none at all.

    A bad ``last.pt`` is reported with a :class:`CheckpointWarning`, renamed to
    ``last.pt.corrupt``, and ``prev.pt`` is used. If every checkpoint present is bad, raises
    :class:`CheckpointError` listing each file and its fault.
    """
    directory = Path(directory)
    for stale in directory.glob(f".{LAST}.tmp-*"):
        stale.unlink(missing_ok=True)  # a save that was killed before its rename
    errors: list[str] = []
    for name in (LAST, PREV):
        path = directory / name
        if not path.exists():
            continue
        try:
            state = read_checkpoint(path)
        except CheckpointError as err:
            errors.append(str(err))
            continue
        if errors:
            bad = directory / LAST
            if bad.exists():
                os.replace(bad, bad.with_name(LAST + ".corrupt"))
                fsync_dir(directory)
            warnings.warn(
                f"{errors[0]}; resuming from the previous good checkpoint {path} instead "
                f"(the bad file is kept as {LAST}.corrupt)",
                CheckpointWarning,
                stacklevel=2,
            )
        return state, path
    if errors:
        raise CheckpointError("no usable checkpoint: " + "; ".join(errors))
    return None
