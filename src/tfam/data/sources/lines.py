"""Text files read line by line with errors that say where: ``FILE:LINE``.

    lines = decode_lines(raw_bytes, "data/web.conllu")   # ["line 1", "line 2", ...]
    read_lines("data/web.conllu")                         # the same, from the file

A byte that is not UTF-8 is one ValueError naming the file, the line and the column (a decode
of the whole file would only give a byte offset), so every reader of a data set reports a
broken file the same way.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["decode_lines", "read_lines"]


def decode_lines(raw: bytes, where: str | os.PathLike) -> list[str]:
    """The lines of UTF-8 ``raw`` (a leading BOM dropped; split at ``\\n`` only, a ``\\r``
    before it dropped, so line numbers are those of any editor); ValueError "WHERE:LINE: ..."
    at the first byte that is not UTF-8."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        start = err.start
        line = raw.count(b"\n", 0, start) + 1
        column = start - (raw.rfind(b"\n", 0, start) + 1) + 1
        raise ValueError(
            f"{where}:{line}: byte 0x{raw[start]:02x} at column {column} is not UTF-8; save the "
            "file as UTF-8"
        ) from None
    text = text.removeprefix("\ufeff")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the file's last line ends with a newline
    return [line.removesuffix("\r") for line in lines]


def read_lines(path: str | os.PathLike) -> list[str]:
    """The lines of the UTF-8 text file ``path`` (see :func:`decode_lines`)."""
    return decode_lines(Path(path).read_bytes(), path)
