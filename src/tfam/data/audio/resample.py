"""Band-limited resampling: windowed-sinc interpolation, polyphase for rational ratios.

The output sample n lies at time n / new_rate; it is the input's sinc interpolation through a
low-pass filter at the lower of the two Nyquist frequencies (times ``rolloff``), the sinc
truncated to ``lowpass_filter_width`` zero crossings each side and tapered by a Hann window, as
torchaudio's ``functional.resample`` (its default ``sinc_interp_hann``) computes it:

    y[n] = sum_k x[k] * (b / r_in) * sinc(b (k / r_in - n / r_out)) * w(b (k / r_in - n / r_out))
    b = rolloff * min(r_in, r_out)          (the filter passes frequencies below b / 2)
    w(t) = cos^2(pi t / (2 L)) for |t| <= L, else 0          (L = lowpass_filter_width)

with sinc(t) = sin(pi t) / (pi t). Dividing both rates by their gcd, the output's phase against
the input repeats every r_out / g samples, so the filter is r_out / g kernels applied as one
strided conv1d (the polyphase form). Where the reduced ratio would make that kernel bank too big
(e.g. 44,099 -> 16,000 Hz), the same sum is evaluated directly at every output time.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

# Above this many kernel taps (r_out / g kernels of 2 width + r_in / g taps) the direct form is
# cheaper than building the polyphase bank.
_MAX_POLYPHASE_TAPS = 1 << 22


def _check_rate(name: str, rate: int) -> int:
    if isinstance(rate, bool) or int(rate) != rate or rate <= 0:
        raise ValueError(f"resample: {name} must be a positive whole number of Hz, got {rate!r}")
    return int(rate)


def _sinc_kernel(
    orig: int, new: int, lowpass_filter_width: int, rolloff: float
) -> tuple[torch.Tensor, int]:
    """The polyphase bank for reduced rates ``orig -> new``: (new, 1, 2 width + orig) float64
    and ``width`` (input samples of context each side)."""
    base = min(orig, new) * rolloff  # b, in units of the reduced rate
    width = math.ceil(lowpass_filter_width * orig / base)
    # Input sample offsets k / orig (k = -width .. width + orig - 1) minus each phase's output
    # time n / new (n = 0 .. new - 1): t = b (k / r_in - n / r_out).
    idx = torch.arange(-width, width + orig, dtype=torch.float64)[None, None] / orig
    t = torch.arange(0, -new, -1, dtype=torch.float64)[:, None, None] / new + idx
    t = (t * base).clamp_(-lowpass_filter_width, lowpass_filter_width)
    window = torch.cos(t * math.pi / lowpass_filter_width / 2) ** 2  # w(t), Hann taper
    t = t * math.pi
    sinc = torch.where(t == 0, torch.ones_like(t), torch.sin(t) / t)
    return sinc * window * (base / orig), width  # (b / r_in) sinc(.) w(.)


def _direct(
    x: torch.Tensor, orig: int, new: int, lowpass_filter_width: int, rolloff: float, out_len: int
) -> torch.Tensor:
    """The same sum evaluated at each output time (no polyphase bank): x (N, S) -> (N, out_len)."""
    base = min(orig, new) * rolloff
    half = math.ceil(lowpass_filter_width * orig / base)  # input samples each side
    taps = torch.arange(-half, half + 2, dtype=torch.float64)
    out = []
    chunk = max(1, 65536 // taps.numel())
    padded = F.pad(x, (half + 1, half + 2))
    for start in range(0, out_len, chunk):
        n = torch.arange(start, min(out_len, start + chunk), dtype=torch.float64)
        centre = torch.floor(n * orig / new)  # the input sample at or before n / r_out
        k = centre[:, None] + taps[None]  # (n, taps) input indices
        t = (base * (k / orig - n[:, None] / new)).clamp_(
            -lowpass_filter_width, lowpass_filter_width
        )
        window = torch.cos(t * math.pi / lowpass_filter_width / 2) ** 2
        t = t * math.pi
        sinc = torch.where(t == 0, torch.ones_like(t), torch.sin(t) / t)
        weights = (sinc * window * (base / orig)).to(x.dtype)
        index = (k.long() + half + 1).clamp_(0, padded.shape[-1] - 1)
        # Indices outside the signal read the zero padding (clamped ones have zero weight).
        out.append((padded[:, index] * weights).sum(-1))
    return torch.cat(out, dim=-1) if out else x.new_zeros(x.shape[0], 0)


def resample(
    waveform: torch.Tensor,
    orig_rate: int,
    new_rate: int,
    *,
    lowpass_filter_width: int = 6,
    rolloff: float = 0.99,
) -> torch.Tensor:
    """Resample ``waveform`` (..., samples) from ``orig_rate`` to ``new_rate`` Hz ->
    (..., ceil(samples * new_rate / orig_rate)), same dtype (float32 or float64).

    Windowed-sinc (Hann) band-limited interpolation: frequencies above
    ``rolloff * min(orig_rate, new_rate) / 2`` are removed before the rate changes, so nothing
    aliases when downsampling. Equal rates return the input unchanged. The signal is taken as
    zero outside its ends (the first and last ``lowpass_filter_width`` zero crossings see it).
    """
    orig_rate = _check_rate("orig_rate", orig_rate)
    new_rate = _check_rate("new_rate", new_rate)
    if not 0.0 < rolloff <= 1.0:
        raise ValueError(f"resample: rolloff must be in (0, 1], got {rolloff!r}")
    if orig_rate == new_rate:
        return waveform
    if not waveform.is_floating_point():
        waveform = waveform.float()
    g = math.gcd(orig_rate, new_rate)
    orig, new = orig_rate // g, new_rate // g
    shape = waveform.shape
    x = waveform.reshape(-1, shape[-1])
    length = shape[-1]
    out_len = -(-new * length // orig)  # ceil(new * length / orig), exact in integers
    width = math.ceil(lowpass_filter_width * orig / (min(orig, new) * rolloff))
    if new * (2 * width + orig) <= _MAX_POLYPHASE_TAPS:
        kernel, width = _sinc_kernel(orig, new, lowpass_filter_width, rolloff)
        kernel = kernel.to(dtype=x.dtype, device=x.device)
        # Output n = j new + p reads input from j orig - width: stride orig, phase p's kernel.
        y = F.conv1d(F.pad(x, (width, width + orig))[:, None], kernel, stride=orig)
        y = y.transpose(1, 2).reshape(x.shape[0], -1)[:, :out_len]
    else:
        y = _direct(x, orig, new, lowpass_filter_width, rolloff, out_len)
    return y.reshape(*shape[:-1], y.shape[-1])
