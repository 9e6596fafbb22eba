"""WAV files: reading every common encoding, writing 16-bit PCM, loading for the models.

Reading parses the RIFF chunks itself: Python 3.11's ``wave`` reads integer PCM only (no IEEE
float, format tag 3, and no WAVE_FORMAT_EXTENSIBLE, tag 0xFFFE), and one parser gives one set of
errors. Writing goes through ``wave`` (16-bit PCM) and ``atomic_write_bytes``. Every problem
with a file is an ``AudioError``: one line naming the file, what is wrong and what is valid.
"""

from __future__ import annotations

import io
import os
import struct
import wave
from pathlib import Path

import numpy as np
import torch

from tfam.data.audio.features import SAMPLE_RATE
from tfam.data.audio.resample import resample
from tfam.fileio import atomic_write_bytes

VALID = "a WAV file (RIFF/WAVE) of 8-, 16-, 24- or 32-bit PCM or 32- or 64-bit IEEE float samples"
SILENCE_THRESHOLD = 1e-4  # peak amplitude (-80 dBFS) at or below which a recording is silent

_PCM, _FLOAT, _EXTENSIBLE = 0x0001, 0x0003, 0xFFFE
# The 14 bytes after the format tag in every KSDATAFORMAT_SUBTYPE_* GUID of the WAV family.
_GUID_TAIL = b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
_FORMAT_NAMES = {
    0x0002: "Microsoft ADPCM",
    0x0006: "A-law",
    0x0007: "mu-law",
    0x0011: "IMA ADPCM",
    0x0031: "GSM 6.10",
    0x0050: "MPEG",
    0x0055: "MP3",
}
_MAGIC = (
    (b"\x89PNG", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"%PDF", "a PDF document"),
    (b"PK\x03\x04", "a ZIP archive"),
    (b"fLaC", "FLAC audio"),
    (b"OggS", "an Ogg file (Vorbis or Opus audio)"),
    (b"ID3", "MP3 audio"),
    (b"\xff\xfb", "MP3 audio"),
    (b"\xff\xf3", "MP3 audio"),
    (b"FORM", "an AIFF file"),
    (b"RF64", "an RF64 file (WAV over 4 GB, not supported)"),
    (b"RIFX", "a big-endian RIFX file (not supported)"),
)


class AudioError(ValueError):
    """A file that is not readable audio: one line naming the file, what is wrong and what is
    valid (not a WAV, unsupported encoding, truncated, no samples, silent)."""


def _fail(path: str | os.PathLike, what: str, valid: str = VALID) -> AudioError:
    return AudioError(f"{os.fspath(path)}: {what}; expected {valid}")


def _looks_like(head: bytes) -> str:
    """What a file that is not a WAV seems to be, from its first bytes."""
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    if head.startswith(b"RIFF") and len(head) >= 12:
        form = head[8:12].decode("latin-1").strip()
        return f"a RIFF {form!r} file, not WAVE"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return "unrecognised bytes"
    return (
        "text" if text.isprintable() or text.strip() == "" or "\n" in text else "unrecognised bytes"
    )


def _decode(raw: bytes, fmt: int, bits: int, channels: int) -> np.ndarray:
    """Interleaved sample bytes -> (channels, samples) float32 in [-1, 1) (floats as stored)."""
    if fmt == _FLOAT:
        x = np.frombuffer(raw, dtype="<f4" if bits == 32 else "<f8").astype(np.float32)
    elif bits == 8:  # unsigned, silence at 128
        x = (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    elif bits == 16:
        x = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    elif bits == 24:  # three little-endian bytes: place them in the top of an int32 (sign kept)
        b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        v = (b[:, 0] << 8) | (b[:, 1] << 16) | (b[:, 2] << 24)
        x = (v >> 8).astype(np.float32) / 8388608.0
    else:  # 32-bit PCM
        x = (np.frombuffer(raw, dtype="<i4").astype(np.float64) / 2147483648.0).astype(np.float32)
    return np.ascontiguousarray(x.reshape(-1, channels).T)


def read_wav(path: str | os.PathLike) -> tuple[torch.Tensor, int]:
    """Read a WAV file -> (waveform (channels, samples) float32, sample rate in Hz).

    Integer PCM (8-bit unsigned, 16-, 24-, 32-bit signed) is scaled to [-1, 1) by 2^(bits-1);
    IEEE float (32 or 64 bits) is kept as stored. Plain (tag 1 or 3) and
    WAVE_FORMAT_EXTENSIBLE (tag 0xFFFE) headers; chunks other than ``fmt `` and ``data`` are
    skipped; a data chunk whose size overruns the file (a recording cut short, a streaming
    writer's placeholder size) is read up to the last whole sample frame. A file with a valid
    header and no samples gives (channels, 0). Anything else: ``AudioError``.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise _fail(path, "no such file") from None
    except IsADirectoryError:
        raise _fail(path, "is a directory, not a file") from None
    except OSError as err:
        raise _fail(path, f"cannot be read ({err.strerror or err})") from None
    if not data:
        raise _fail(path, "empty file (0 bytes)")
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise _fail(path, f"not a WAV file (it looks like {_looks_like(data[:64])})")

    fmt_chunk: bytes | None = None
    raw: bytes | None = None
    pos = 12
    while pos + 8 <= len(data):
        cid, size = data[pos : pos + 4], struct.unpack_from("<I", data, pos + 4)[0]
        body = data[pos + 8 : pos + 8 + size]  # cut short at the end of the file
        if cid == b"fmt ":
            fmt_chunk = body
        elif cid == b"data":
            raw = body
            if fmt_chunk is not None:
                break  # samples found; what follows (LIST, id3) does not matter
        pos += 8 + size + (size & 1)  # chunks are padded to an even length
    if fmt_chunk is None:
        raise _fail(path, "WAV file has no 'fmt ' chunk (corrupt or truncated)")
    if raw is None:
        raise _fail(path, "WAV file has no 'data' chunk (corrupt or truncated)")
    if len(fmt_chunk) < 16:
        raise _fail(path, f"WAV 'fmt ' chunk is {len(fmt_chunk)} bytes, shorter than 16 (corrupt)")
    fmt, channels, rate, _, block_align, bits = struct.unpack_from("<HHIIHH", fmt_chunk)
    if fmt == _EXTENSIBLE:
        if len(fmt_chunk) < 40:
            raise _fail(path, "WAVE_FORMAT_EXTENSIBLE header is shorter than 40 bytes (corrupt)")
        sub = fmt_chunk[24:40]
        if sub[2:] != _GUID_TAIL:
            raise _fail(path, f"unsupported WAVE_FORMAT_EXTENSIBLE sub-format {sub.hex()}")
        fmt = struct.unpack_from("<H", sub)[0]
    if fmt not in (_PCM, _FLOAT):
        name = _FORMAT_NAMES.get(fmt, "unknown")
        raise _fail(path, f"unsupported WAV encoding (format tag 0x{fmt:04X}: {name})")
    if (fmt == _PCM and bits not in (8, 16, 24, 32)) or (fmt == _FLOAT and bits not in (32, 64)):
        kind = "PCM" if fmt == _PCM else "IEEE float"
        raise _fail(path, f"unsupported WAV encoding ({bits}-bit {kind})")
    if channels < 1:
        raise _fail(path, "WAV header says 0 channels (corrupt)")
    if rate < 1:
        raise _fail(path, "WAV header says a sample rate of 0 Hz (corrupt)")
    frame_bytes = channels * bits // 8
    if block_align not in (0, frame_bytes):
        raise _fail(
            path,
            f"WAV block align {block_align} does not match {channels} channel(s) of {bits} bits",
        )
    whole = len(raw) - len(raw) % frame_bytes  # drop a partial last frame (a cut-off file)
    samples = _decode(raw[:whole], fmt, bits, channels)
    return torch.from_numpy(samples), int(rate)


def write_wav(path: str | os.PathLike, waveform: torch.Tensor, sample_rate: int) -> None:
    """Write ``waveform`` ((samples,) or (channels, samples), floats in [-1, 1]) as a 16-bit PCM
    WAV at ``sample_rate``: round(x * 32768) clipped to [-32768, 32767]. Written atomically
    (temporary file, fsync, rename)."""
    x = torch.as_tensor(waveform).detach().to("cpu", torch.float64)
    if x.dim() == 1:
        x = x[None]
    if x.dim() != 2 or x.shape[0] < 1:
        raise ValueError(
            f"write_wav: waveform must be (samples,) or (channels, samples), got {tuple(x.shape)}"
        )
    if isinstance(sample_rate, bool) or int(sample_rate) != sample_rate or sample_rate < 1:
        raise ValueError(f"write_wav: sample_rate must be a positive integer, got {sample_rate!r}")
    if not torch.isfinite(x).all():
        raise ValueError("write_wav: waveform has NaN or infinite samples")
    pcm = torch.clamp(torch.round(x * 32768.0), -32768, 32767).to(torch.int16)
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as w:
        w.setnchannels(x.shape[0])
        w.setsampwidth(2)
        w.setframerate(int(sample_rate))
        w.writeframes(pcm.T.contiguous().numpy().astype("<i2").tobytes())
    atomic_write_bytes(path, buffer.getvalue())


def load_audio(path: str | os.PathLike, sample_rate: int = SAMPLE_RATE) -> torch.Tensor:
    """A recording as the models take it: (samples,) float32 mono in [-1, 1] at ``sample_rate``.

    Any WAV ``read_wav`` reads; channels are averaged (stereo mixed down), the rate converted by
    ``resample``, and a float file (or the resampler's overshoot) whose peak exceeds 1 scaled
    down to peak 1. Errors (``AudioError``, one line naming the file): not a WAV, unsupported
    encoding, no samples, NaN or infinite samples, silent (peak at most 1e-4, -80 dBFS).
    """
    waveform, rate = read_wav(path)
    if waveform.shape[-1] == 0:
        raise _fail(
            path, "no samples (the WAV's data chunk is empty)", "a recording of at least one sample"
        )
    if not torch.isfinite(waveform).all():
        raise _fail(path, "has NaN or infinite samples (a corrupt float WAV)", "finite samples")
    mono = waveform.mean(dim=0)  # (samples,): the channels' average
    peak = float(mono.abs().max())
    if peak <= SILENCE_THRESHOLD:
        raise _fail(
            path,
            f"silent (peak amplitude {peak:.1e}, at most {SILENCE_THRESHOLD:g})",
            "a recording with sound in it",
        )
    mono = resample(mono, rate, sample_rate)
    peak = float(mono.abs().max())
    if peak > 1.0:
        mono = mono / peak
    return mono.contiguous()
