"""Pictures of speech: a recording's log-mel frames with its labelled segments, and a speech
encoder's per-head attention over its frames.

    plot_frames(features, "frames.png", tiers=[("words", words), ("phonemes", phonemes)])
    plot_speech_attention(features, weights, "attention.png", subsampling=2)

``features`` (T, n_mels) are the frames the model reads (25 ms windows every 10 ms: frame t
covers [10 t, 10 t + 25) ms and stands for the 10 ms around its centre, 10 t + 12.5 ms);
a segment is (start s, end s, label). Attention maps (H, T', T') are over the encoder's
frames, ``subsampling`` input frames each (T' = ceil(T / s)): query rows, key columns, both
drawn in seconds, so truncated (``local``) attention shows as a band of +-window frames about
the diagonal.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from torch import Tensor

from tfam.viz.figure import save_figure

__all__ = ["Segments", "plot_frames", "plot_speech_attention", "runs_of", "segments_in_seconds"]

FRAME_SHIFT_S = 0.01  # 160 samples at 16 kHz
Segments = Sequence[tuple[float, float, str]]


def runs_of(labels: Sequence[str]) -> list[tuple[float, float, str]]:
    """A label per 10 ms frame -> (start s, end s, label) runs of one label, silence ("sil")
    kept. Frame t is labelled at its centre, 10 t + 12.5 ms, and stands for the 10 ms around
    it, so a run of frames a..b-1 spans 10 a + 7.5 .. 10 b + 7.5 ms (the first from 0)."""
    out: list[list] = []
    for t, label in enumerate(labels):
        if out and out[-1][2] == label:
            out[-1][1] = t + 1
        else:
            out.append([t, t + 1, label])
    edge = lambda t: 0.0 if t == 0 else t * FRAME_SHIFT_S + 0.0075  # noqa: E731
    return [(edge(a), edge(b), lab) for a, b, lab in out]


def _spectrogram(ax, features: Tensor, seconds: float) -> None:  # noqa: ANN001
    """Log-mel frames (T, M) as an image: time in seconds across, mel bands up."""
    f = np.asarray(features.detach().float().cpu()).T  # (M, T)
    ax.imshow(f, origin="lower", aspect="auto", cmap="magma", extent=(0, seconds, 0, f.shape[0]),
              interpolation="nearest")  # fmt: skip
    ax.set_ylabel("mel band")


def _tier(ax, name: str, segments: Segments, seconds: float, colour: str, size: int) -> None:  # noqa: ANN001
    """One row of labelled segments, alternating shades, silence left blank."""
    ax.set_xlim(0, seconds)
    ax.set_ylim(0, 1)
    ax.set_yticks([])
    ax.set_ylabel(name, rotation=0, ha="right", va="center", fontsize=9)
    for n, (start, end, label) in enumerate(segments):
        if label in ("sil", ""):
            if label == "":  # an unlabelled mark (an error span): drawn, no text
                ax.axvspan(start, end, color=colour, alpha=0.8, lw=0)
            continue
        ax.axvspan(start, end, color=colour, alpha=0.25 if n % 2 else 0.45, lw=0)
        ax.text((start + end) / 2, 0.5, label, ha="center", va="center", fontsize=size,
                clip_on=True)  # fmt: skip


def plot_frames(
    features: Tensor,
    out: str | Path | None = None,
    *,
    tiers: Sequence[tuple[str, Segments]] = (),
    title: str | None = None,
):  # noqa: ANN201  (a matplotlib Figure)
    """The log-mel frames (T, M) of a recording with rows of labelled segments under them
    (words, phonemes, a model's predictions; a tier named "errors" is drawn in red), time in
    seconds on a shared axis; saved to ``out`` (PNG) when given."""
    from matplotlib.figure import Figure

    if features.ndim != 2:
        raise ValueError(f"features have shape {tuple(features.shape)}; expected (T, n_mels)")
    seconds = features.shape[0] * FRAME_SHIFT_S + 0.015
    width = float(min(24.0, max(8.0, 2.5 * seconds)))
    ratios = [3.0] + [0.45] * len(tiers)
    height = 2.6 + 0.45 * len(tiers)
    fig = Figure(figsize=(width, height))  # margins set by hand: constrained layout is slow
    fig.subplots_adjust(left=1.3 / width, right=1 - 0.3 / width, bottom=0.5 / height,
                        top=1 - 0.75 / height, hspace=0.25)  # fmt: skip
    axes = fig.subplots(1 + len(tiers), 1, sharex=True, height_ratios=ratios, squeeze=False)[:, 0]
    _spectrogram(axes[0], features, seconds)
    colours = ["tab:blue", "tab:green", "tab:orange", "tab:purple", "tab:brown"]
    for k, (name, segments) in enumerate(tiers):
        many = len(segments) > 4 * seconds  # phonemes: smaller text
        colour = "tab:red" if name == "errors" else colours[k % len(colours)]
        _tier(axes[k + 1], name, segments, seconds, colour, 6 if many else 9)
    axes[-1].set_xlabel("time (s)")
    axes[-1].set_xlim(0, seconds)
    if title:
        fig.suptitle(title, fontsize=11)
    return save_figure(fig, out)


def plot_speech_attention(
    features: Tensor,
    weights: Tensor,
    out: str | Path | None = None,
    *,
    subsampling: int = 1,
    segments: Segments = (),
    title: str | None = None,
    columns: int = 4,
):  # noqa: ANN201  (a matplotlib Figure)
    """Per-head attention (H, T', T') of one block over a recording's frames, each head under
    the log-mel frames (T, M) on the same time axis (keys across, queries down, seconds);
    ``segments`` (the words) are marked on the frames. Colour is the weight on a square-root
    scale, so the few frames a truncated window admits stand out; saved to ``out``."""
    from matplotlib.colors import PowerNorm
    from matplotlib.figure import Figure

    if weights.ndim != 3 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"weights have shape {tuple(weights.shape)}; expected (H, T', T')")
    heads, length = weights.shape[0], weights.shape[-1]
    seconds = features.shape[0] * FRAME_SHIFT_S + 0.015
    span = length * subsampling * FRAME_SHIFT_S  # the encoder's frames, in seconds
    cols = min(columns, heads)
    rows = -(-heads // cols)
    side = 3.6
    width, height = side * cols + 1.6, (side + 1.0) * rows + 0.8
    fig = Figure(figsize=(width, height))  # margins set by hand: constrained layout is slow
    grid = fig.add_gridspec(
        2 * rows, cols, height_ratios=[0.9, side] * rows, left=0.9 / width,
        right=1 - 1.1 / width, bottom=0.55 / height, top=1 - 0.8 / height, hspace=0.12,
        wspace=0.15,
    )  # fmt: skip
    w = np.asarray(weights.detach().float().cpu())
    norm = PowerNorm(0.5, vmin=0.0, vmax=max(float(w.max()), 1e-9))
    image = None
    for h in range(heads):
        r, c = divmod(h, cols)
        spec = fig.add_subplot(grid[2 * r, c])
        _spectrogram(spec, features, seconds)
        for start, end, label in segments:
            if label != "sil":
                spec.axvline(start, color="white", lw=0.5, alpha=0.7)
                spec.text((start + end) / 2, features.shape[1] * 0.85, label, color="white",
                          ha="center", fontsize=7, clip_on=True)  # fmt: skip
        spec.set_xlim(0, span)
        spec.tick_params(labelbottom=False)  # the shared time axis is labelled below
        spec.set_ylabel("mel" if c == 0 else "")
        spec.set_title(f"head {h + 1}", fontsize=10)
        ax = fig.add_subplot(grid[2 * r + 1, c], sharex=spec)
        image = ax.imshow(w[h], cmap="viridis", norm=norm, extent=(0, span, span, 0),
                          interpolation="nearest", aspect="auto")  # fmt: skip
        ax.set_xlabel("key frame time (s)")
        if c == 0:
            ax.set_ylabel("query frame time (s)")
    if image is not None:
        bar = fig.add_axes((1 - 0.85 / width, 0.55 / height, 0.12 / width, 0.6))
        fig.colorbar(image, cax=bar, label="attention weight")
    if title:
        fig.suptitle(title, fontsize=11)
    return save_figure(fig, out)


def segments_in_seconds(segments: Sequence, sample_rate: int = 16_000, strip: bool = False) -> list:
    """Corpus segments (start sample, end sample, label) -> (start s, end s, label); ``strip``
    drops a phoneme's language prefix ("en:f" -> "f")."""
    out = []
    for s in segments:
        label = s.label.split(":", 1)[-1] if strip else s.label
        out.append((s.start / sample_rate, s.end / sample_rate, label))
    return out
