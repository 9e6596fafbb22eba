"""A small reader and writer for IDX files, the format MNIST and Fashion-MNIST ship in.

Layout (big-endian): two zero bytes, a type code, the number of dimensions ``k``, then ``k``
unsigned 32-bit sizes, then the values in C order. Files may be gzip-compressed; compression is
recognised from the first two bytes, not from the file name.
"""

from __future__ import annotations

import gzip
import math
import os
import zlib
from pathlib import Path

import numpy as np

__all__ = ["IDXFormatError", "read_idx", "write_idx"]

# Type code -> big-endian dtype, as the IDX format defines them.
IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_GZIP_MAGIC = b"\x1f\x8b"


class IDXFormatError(ValueError):
    """A file that is not a valid IDX file: bad magic number, header or byte count."""


def _read_exact(f, n: int, path: Path, what: str) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise IDXFormatError(
            f"{path}: truncated IDX file: {what} needs {n} bytes, found {len(data)}"
        )
    return data


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file (gzip-compressed or plain) into a writable array in native byte order.

    Raises IDXFormatError (a ValueError) naming the file when the magic number, the header or the
    number of data bytes is wrong (a truncated download, an HTML error page saved as .gz, ...).
    """
    path = Path(path)
    with open(path, "rb") as raw:
        compressed = raw.read(2) == _GZIP_MAGIC
    opener = gzip.open if compressed else open
    try:
        with opener(path, "rb") as f:
            magic = _read_exact(f, 4, path, "the magic number")
            if magic[0] != 0 or magic[1] != 0 or magic[2] not in IDX_DTYPES:
                raise IDXFormatError(
                    f"{path}: not an IDX file: magic number {magic.hex()} should be 0000TTNN "
                    f"with type TT in {{{', '.join(f'{t:02x}' for t in IDX_DTYPES)}}}"
                )
            dtype, ndim = IDX_DTYPES[magic[2]], magic[3]
            if ndim == 0:
                raise IDXFormatError(f"{path}: IDX header declares 0 dimensions")
            dims = tuple(
                int(d) for d in np.frombuffer(_read_exact(f, 4 * ndim, path, "the sizes"), ">u4")
            )
            n_bytes = math.prod(dims) * dtype.itemsize
            # Read straight into the final buffer: no second copy of a 47 MB image file.
            out = np.empty(n_bytes, dtype=np.uint8)
            view, got = memoryview(out), 0
            while got < n_bytes:
                k = f.readinto(view[got:])
                if not k:
                    break
                got += k
            if got != n_bytes:
                raise IDXFormatError(
                    f"{path}: truncated IDX file: sizes {dims} of {dtype.itemsize}-byte values "
                    f"need {n_bytes} data bytes, found {got}"
                )
            if f.read(1):
                raise IDXFormatError(
                    f"{path}: IDX file has bytes after the {n_bytes} its sizes {dims} declare"
                )
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise IDXFormatError(f"{path}: corrupt gzip stream ({err})") from err
    arr = out.view(dtype).reshape(dims)
    return arr if dtype.itemsize == 1 else arr.astype(dtype.newbyteorder("="))


def write_idx(path: str | os.PathLike, array: np.ndarray, *, compress: bool | None = None) -> None:
    """Write ``array`` as an IDX file; gzip-compressed when ``compress`` (default: name ends .gz)."""
    path = Path(path)
    array = np.asarray(array)
    codes = {dt.newbyteorder("="): code for code, dt in IDX_DTYPES.items()}
    code = codes.get(array.dtype.newbyteorder("="))
    if code is None:
        valid = ", ".join(str(dt.newbyteorder("=")) for dt in IDX_DTYPES.values())
        raise ValueError(f"write_idx: dtype {array.dtype} has no IDX type code; use one of {valid}")
    if not 1 <= array.ndim <= 255:
        raise ValueError(f"write_idx: array must have 1..255 dimensions, got {array.ndim}")
    header = bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, ">u4").tobytes()
    payload = header + np.ascontiguousarray(array, IDX_DTYPES[code]).tobytes()
    if compress is None:
        compress = path.suffix == ".gz"
    path.write_bytes(gzip.compress(payload) if compress else payload)
