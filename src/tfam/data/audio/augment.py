"""Training-time changes to audio and features: noise at a signal-to-noise ratio, SpecAugment."""

from __future__ import annotations

import math

import torch


def mix_at_snr(signal: torch.Tensor, noise: torch.Tensor, snr_db: float) -> torch.Tensor:
    """``signal + g * noise`` (..., samples), with the gain g chosen so that
    10 log10(P_signal / P_(g noise)) = ``snr_db``, P the mean square over the samples axis:
    g = sqrt(P_signal / (P_noise 10^(snr_db / 10))). A noise shorter than the signal is repeated,
    a longer one cut to the signal's length. The sum may exceed [-1, 1]; scaling it (both parts
    alike) keeps the ratio. A silent signal or noise is a ValueError."""
    if not math.isfinite(snr_db):
        raise ValueError(f"mix_at_snr: snr_db must be a finite number of dB, got {snr_db!r}")
    n = signal.shape[-1]
    if n == 0:
        raise ValueError("mix_at_snr: the signal has no samples")
    if noise.shape[-1] == 0:
        raise ValueError("mix_at_snr: the noise has no samples")
    if noise.shape[-1] < n:  # repeat the noise to cover the signal
        noise = noise.repeat(*([1] * (noise.dim() - 1)), -(-n // noise.shape[-1]))
    noise = noise[..., :n].to(signal.dtype)
    p_signal = signal.double().square().mean(dim=-1, keepdim=True)
    p_noise = noise.double().square().mean(dim=-1, keepdim=True)
    if bool((p_signal == 0).any()) or bool((p_noise == 0).any()):
        which = "signal" if bool((p_signal == 0).any()) else "noise"
        raise ValueError(f"mix_at_snr: the {which} is silent (power 0): no ratio to set")
    gain = torch.sqrt(p_signal / (p_noise * 10.0 ** (snr_db / 10.0)))
    return signal + (gain * noise).to(signal.dtype)


def spec_augment(
    features: torch.Tensor,
    *,
    freq_masks: int = 2,
    freq_width: int = 27,
    time_masks: int = 2,
    time_width: int = 40,
    max_time_ratio: float = 0.2,
    value: float | str = 0.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """SpecAugment's masks (Park et al. 2019, without time warping): features (T, n_mels) or
    (B, T, n_mels) -> a masked copy (each utterance of a batch drawn on its own).

    ``freq_masks`` times: f ~ U{0..F} (F = ``freq_width``), f0 ~ U{0..n_mels - f}, bands
    [f0, f0 + f) set to ``value``; ``time_masks`` times: t ~ U{0..T'} with
    T' = min(``time_width``, floor(``max_time_ratio`` * T)) (Park's upper bound p), t0 ~
    U{0..T - t}, frames [t0, t0 + t) set to ``value``. ``value`` 0 suits normalised features
    (their mean); ``"mean"`` uses each utterance's mean. Deterministic under ``generator``.
    """
    for name, count in (("freq_masks", freq_masks), ("freq_width", freq_width),
                        ("time_masks", time_masks), ("time_width", time_width)):  # fmt: skip
        if isinstance(count, bool) or int(count) != count or count < 0:
            raise ValueError(f"spec_augment: {name} must be a whole number >= 0, got {count!r}")
    if not 0.0 <= max_time_ratio <= 1.0:
        raise ValueError(f"spec_augment: max_time_ratio must be in [0, 1], got {max_time_ratio!r}")
    if isinstance(value, str) and value != "mean":
        raise ValueError(f"spec_augment: value must be a number or 'mean', got {value!r}")
    if features.dim() not in (2, 3):
        raise ValueError(
            f"spec_augment: features must be (T, n_mels) or (B, T, n_mels), got {tuple(features.shape)}"
        )
    out = features.clone()
    batch = out if out.dim() == 3 else out[None]

    def draw(high: int) -> int:  # U{0..high}
        return int(torch.randint(0, high + 1, (1,), generator=generator))

    for x in batch:  # (T, n_mels) views into out
        frames, bands = x.shape
        fill = x.mean() if value == "mean" else value
        for _ in range(freq_masks):
            f = draw(min(freq_width, bands))
            f0 = draw(bands - f)
            x[:, f0 : f0 + f] = fill
        t_max = min(time_width, int(max_time_ratio * frames))
        for _ in range(time_masks):
            t = draw(t_max)
            t0 = draw(frames - t)
            x[t0 : t0 + t, :] = fill
    return out
