"""Frames and log-mel filterbank features, as Kaldi's ``compute-fbank-feats`` computes them.

A frame is 25 ms shifted by 10 ms (400 / 160 samples at 16 kHz), frames start at sample 0 and
only whole frames count (no centre padding: Kaldi's ``snip_edges``), so one second gives
1 + (16000 - 400) // 160 = 98 frames. ``fbank`` is vectorised over all frames at once (one
``unfold``, one ``rfft``, one matrix product): no Python loop per frame.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

import torch

from tfam.data.audio.resample import resample

SAMPLE_RATE = 16_000  # Hz: every feature is computed at this rate
FRAME_LENGTH = 400  # samples: 25 ms at 16 kHz
FRAME_SHIFT = 160  # samples: 10 ms at 16 kHz
N_FFT = 512  # the frame zero-padded to the next power of two (Kaldi's round_to_power_of_two)
LOG_FLOOR = 1e-10  # mel energies below this are clamped before the log (no -inf)
WINDOWS = ("povey", "hann", "hamming", "rectangular")


def num_frames(num_samples: int) -> int:
    """Whole 25 ms frames shifted by 10 ms in ``num_samples`` samples at 16 kHz:
    0 if fewer than 400, else 1 + (num_samples - 400) // 160 (16,000 -> 98)."""
    if num_samples < FRAME_LENGTH:
        return 0
    return 1 + (num_samples - FRAME_LENGTH) // FRAME_SHIFT


def frame(waveform: torch.Tensor) -> torch.Tensor:
    """Cut (..., samples) into frames (..., num_frames(samples), 400): frame t is samples
    [160 t, 160 t + 400). A view (no copy) where the input is contiguous."""
    n = waveform.shape[-1]
    if n < FRAME_LENGTH:
        return waveform.new_zeros(*waveform.shape[:-1], 0, FRAME_LENGTH)
    return waveform.unfold(-1, FRAME_LENGTH, FRAME_SHIFT)


def mel(freq: torch.Tensor | float) -> torch.Tensor | float:
    """The HTK mel scale: m(f) = 1127 ln(1 + f / 700)."""
    if isinstance(freq, torch.Tensor):
        return 1127.0 * torch.log1p(freq / 700.0)
    return 1127.0 * math.log1p(freq / 700.0)


@lru_cache(maxsize=16)
def _mel_filterbank(
    n_mels: int, n_fft: int, sample_rate: int, f_min: float, f_max: float
) -> torch.Tensor:
    bins = n_fft // 2 + 1
    # Band edges equally spaced in mel between m(f_min) and m(f_max): band b rises from
    # edge b to edge b + 1 and falls to edge b + 2 (n_mels + 2 edges).
    m_lo, m_hi = mel(f_min), mel(f_max)
    edges = m_lo + (m_hi - m_lo) / (n_mels + 1) * torch.arange(n_mels + 2, dtype=torch.float64)
    left, centre, right = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    # Triangles linear in mel (HTK and Kaldi), evaluated at each FFT bin's mel.
    m = mel(torch.arange(bins, dtype=torch.float64) * (sample_rate / n_fft))[None]
    up = (m - left) / (centre - left)
    down = (right - m) / (right - centre)
    weights = torch.clamp(torch.minimum(up, down), min=0.0)
    return weights  # (n_mels, bins) float64


def mel_filterbank(
    n_mels: int = 80,
    n_fft: int = N_FFT,
    sample_rate: int = SAMPLE_RATE,
    f_min: float = 20.0,
    f_max: float | None = None,
) -> torch.Tensor:
    """Triangular filters (n_mels, n_fft // 2 + 1) float64 on the HTK mel scale from ``f_min``
    to ``f_max`` (default: Nyquist). Row b is 0 at mel edge b, 1 at edge b + 1, 0 at edge b + 2,
    linear in mel between; edges equally spaced in mel (Kaldi's ``MelBanks`` with no VTLN)."""
    return _filters(n_mels, n_fft, sample_rate, f_min, f_max).clone()


def _filters(
    n_mels: int, n_fft: int, sample_rate: int, f_min: float, f_max: float | None
) -> torch.Tensor:
    """The cached filterbank after checking its arguments (callers must not modify it)."""
    nyquist = sample_rate / 2
    f_max = nyquist if f_max is None else float(f_max)
    if not 0.0 <= f_min < f_max <= nyquist:
        raise ValueError(
            f"mel_filterbank: need 0 <= f_min < f_max <= Nyquist ({nyquist:g} Hz), "
            f"got f_min={f_min!r}, f_max={f_max!r}"
        )
    if isinstance(n_mels, bool) or int(n_mels) != n_mels or n_mels < 1:
        raise ValueError(f"mel_filterbank: n_mels must be a positive integer, got {n_mels!r}")
    return _mel_filterbank(int(n_mels), int(n_fft), int(sample_rate), float(f_min), f_max)


@lru_cache(maxsize=8)
def _window(kind: str, length: int) -> torch.Tensor:
    n = torch.arange(length, dtype=torch.float64)
    a = 2 * math.pi / (length - 1)  # symmetric windows, as Kaldi's
    if kind == "hann":
        return 0.5 - 0.5 * torch.cos(a * n)
    if kind == "povey":  # Kaldi's default: a Hann window raised to 0.85, non-zero at the ends
        return (0.5 - 0.5 * torch.cos(a * n)) ** 0.85
    if kind == "hamming":
        return 0.54 - 0.46 * torch.cos(a * n)
    if kind == "rectangular":
        return torch.ones(length, dtype=torch.float64)
    raise ValueError(f"fbank: window {kind!r} is not known; valid: {', '.join(WINDOWS)}")


def fbank(
    waveform: torch.Tensor,
    sample_rate: int = SAMPLE_RATE,
    n_mels: int = 80,
    *,
    window: str = "povey",
    preemphasis: float = 0.97,
    remove_dc: bool = True,
    n_fft: int = N_FFT,
    f_min: float = 20.0,
    f_max: float | None = None,
    floor: float = LOG_FLOOR,
) -> torch.Tensor:
    """Log-mel filterbank energies: waveform (..., samples) in [-1, 1] at ``sample_rate`` ->
    (..., num_frames, n_mels) float32 (float64 in, float64 out), computed at 16 kHz.

    The steps, Kaldi's ``fbank`` with ``dither=0`` (torchaudio.compliance.kaldi.fbank gives the
    same energies for the waveform times 32,768, up to the log floor):

    0. ``sample_rate != 16000``: resample to 16 kHz first (band-limited, ``resample``).
    1. frames x_t[i] = x[160 t + i], i < 400, only whole frames (``num_frames``).
    2. ``remove_dc``: x_t[i] -= mean_i x_t[i].
    3. ``preemphasis`` a: x_t[i] -= a x_t[i - 1], with x_t[-1] = x_t[0] (per frame, as Kaldi).
    4. window w[i] (``povey``: (0.5 - 0.5 cos(2 pi i / 399))^0.85; ``hann``, ``hamming``
       symmetric; ``rectangular``).
    5. power spectrum P_t[k] = |sum_i w[i] x_t[i] e^{-2 pi j i k / 512}|^2, k = 0 .. 256 (the
       frame zero-padded to ``n_fft`` = 512).
    6. mel energies E_t[b] = sum_k M[b, k] P_t[k], M the triangular filters of
       ``mel_filterbank`` (HTK mel m(f) = 1127 ln(1 + f / 700), ``f_min`` = 20 Hz to Nyquist).
    7. log: F_t[b] = ln(max(E_t[b], floor)), floor 1e-10, so silence is finite.

    Fewer than 400 samples give (0, n_mels).
    """
    if not isinstance(waveform, torch.Tensor):
        raise TypeError(f"fbank: waveform must be a tensor, got {type(waveform).__name__}")
    if waveform.dim() < 1:
        raise ValueError("fbank: waveform must have a samples axis (..., samples), got a scalar")
    if n_fft < FRAME_LENGTH:
        raise ValueError(f"fbank: n_fft must be at least the frame ({FRAME_LENGTH}), got {n_fft}")
    dtype = waveform.dtype if waveform.dtype == torch.float64 else torch.float32
    x = waveform.to(dtype)
    if sample_rate != SAMPLE_RATE:
        x = resample(x, sample_rate, SAMPLE_RATE)
    frames = frame(x)  # (..., T, 400), step 1
    if remove_dc:
        frames = frames - frames.mean(dim=-1, keepdim=True)  # step 2
    if preemphasis:
        previous = torch.cat([frames[..., :1], frames[..., :-1]], dim=-1)
        frames = frames - preemphasis * previous  # step 3
    w = _window(window, FRAME_LENGTH).to(dtype=dtype, device=x.device)
    spectrum = torch.fft.rfft(frames * w, n=n_fft)  # steps 4-5: (..., T, n_fft // 2 + 1)
    power = spectrum.real.square() + spectrum.imag.square()
    fb = _filters(n_mels, n_fft, SAMPLE_RATE, f_min, f_max)
    energies = power @ fb.to(dtype=dtype, device=x.device).T  # step 6: (..., T, n_mels)
    return torch.log(torch.clamp(energies, min=floor))  # step 7


def normalize(features: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Per-utterance mean and variance normalisation: features (..., T, n_mels) -> the same
    shape with each mel band mean 0 and variance 1 over the T frames:
    y = (x - mean_t x) / sqrt(var_t x + eps) (population variance). One frame gives zeros."""
    if features.dim() < 2:
        raise ValueError(
            f"normalize: features must be (..., T, n_mels), got {tuple(features.shape)}"
        )
    if features.shape[-2] == 0:
        return features.clone()
    mean = features.mean(dim=-2, keepdim=True)
    var = features.var(dim=-2, keepdim=True, unbiased=False)
    return (features - mean) / torch.sqrt(var + eps)


def _segment_fields(segment: Any) -> tuple[int, int, str]:
    if isinstance(segment, Sequence) and not isinstance(segment, str) and len(segment) == 3:
        start, end, label = segment
    else:  # a Segment dataclass (start, end, label), or anything with those attributes
        start, end, label = segment.start, segment.end, segment.label
    return int(start), int(end), str(label)


def frame_labels(segments: Iterable[Any], num_samples: int, silence: str = "sil") -> list[str]:
    """The label of every frame: segments [(start_sample, end_sample, label)] (or objects with
    ``start``, ``end``, ``label``; samples at 16 kHz, end exclusive) -> num_frames(num_samples)
    labels. Frame t covers samples [160 t, 160 t + 400); its label is the segment holding its
    centre sample 160 t + 200 (start <= centre < end), else ``silence``. Where segments
    overlap, the later one in the list wins."""
    total = num_frames(num_samples)
    labels = [silence] * total
    for segment in segments:
        start, end, label = _segment_fields(segment)
        if end < start:
            raise ValueError(f"frame_labels: segment {segment!r} ends before it starts")
        # Frames whose centre c_t = 160 t + 200 satisfies start <= c_t < end.
        first = max(0, -(-(start - FRAME_LENGTH // 2) // FRAME_SHIFT))  # ceil
        stop = min(total, -(-(end - FRAME_LENGTH // 2) // FRAME_SHIFT))
        for t in range(first, stop):
            labels[t] = label
    return labels
