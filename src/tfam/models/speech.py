"""A speech encoder, as the source documents describe speech for self-attention:

frames (B, T, n_mels): a 25 ms window shifted by 10 ms makes one vector (log-mel filterbank,
  tfam.data.audio.fbank), so a few seconds are hundreds or thousands of vectors
  -> subsampling, by ``config.subsampling``:
       1: Linear(n_mels -> D) per frame                                (B, T, D)
       2: Conv1d(n_mels -> D, 3, stride 2) -> GELU                     (B, ceil(T/2), D)
       4: the same, then Conv1d(D -> D, 3, stride 2) -> GELU           (B, ceil(T/4), D)
     (two stride-2 convolutions, as Conformer and ESPnet subsample by 4; the attention mask's
     lengths follow: ceil(length / s))
  -> + position: any scheme over a sequence (tfam.layers.position): fixed sinusoids by
     default; "rope", "alibi" or "relative" inside every self-attention; a learned table of
     ``max_positions`` rows; "generated"; "none"
  -> depth x [ X1 = X0 + MHSA(LN(X0));  X_out = X1 + MLP(LN(X1)) ]  (pre-norm), with
     truncated self-attention by default (``attention="local"``: each frame attends to the
     ``window`` frames on each side, O(T * window), "only the few frames before and after")
  -> LN -> head, by ``config.head``:
       "frames":    a label per input frame: Linear(D -> K), each output frame's logits
                    repeated s times so they sit at the input frame rate (B, s*T', K)
                    (frame t of the input gets output frame t // s; the caller crops to T)
       "utterance": one label per utterance: the frames pooled over time, by ``config.pool``
                    (``mean``: their masked mean (B, D); ``stats``: mean and standard
                    deviation concatenated (B, 2D), the x-vector's statistics pooling,
                    Snyder et al. 2018) -> Linear (B, K)
       "ctc":       a distribution over an output alphabet per output frame, index 0 the
                    CTC blank (Graves et al. 2006): Linear(D -> K) (B, T', K)
       "none":      the frames (B, T', D)

``attention_mask`` (B, T), True/1 = a real frame, hides padding frames from every key. Padding
frames are set to zero before each convolution (so a batch equals its utterances one by one)
and in the features :meth:`Speech.forward_features` returns, which is how the "utterance" head
tells them apart: its mean counts the frames that are not all zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from tfam.config import BaseConfig, check_choice, check_positive_int, config_error
from tfam.layers import TransformerStack, make_norm, padding_mask
from tfam.layers.position import TokenPositions, build_position
from tfam.models.base import AttentionWeights, TfamModel
from tfam.models.registry import register_preset

HEADS = ("frames", "utterance", "ctc", "none")
POOLS = ("mean", "stats")  # how the "utterance" head pools the frames over time
SUBSAMPLING = (1, 2, 4)
# Frames on each side a frame attends to under attention="local" when attention_options
# gives no window: 16 output frames = 320 ms each side at 2x subsampling.
DEFAULT_WINDOW = 16


@dataclass
class SpeechConfig(BaseConfig):
    """Speech encoder: frames -> subsampling -> position -> N pre-norm blocks (truncated
    attention) -> LN -> ``head``. ``attention_options=None`` is the kernel's defaults, with
    ``window=16`` for ``local``."""

    family: ClassVar[str] = "speech"
    # Every scheme over a 1-D sequence of frames.
    position_domains: ClassVar[tuple[str, ...]] = ("sequence", "any")

    dim: int = 144
    depth: int = 4
    heads: int = 4
    ffn_dim: int | None = 576
    attention: str = "local"
    attention_options: dict[str, Any] | None = None  # type: ignore[assignment]
    position: str = "sinusoidal"
    n_mels: int = 80
    subsampling: int = 2
    max_positions: int = 2048  # rows of a learned position table (other schemes: no bound)
    head: str = "frames"
    pool: str = "mean"  # "utterance" head: "mean", or "stats" (mean and standard deviation)
    num_labels: int = 11

    def __post_init__(self) -> None:
        if self.attention_options is None:
            self.attention_options = {"window": DEFAULT_WINDOW} if self.attention == "local" else {}
        super().__post_init__()
        check_positive_int("n_mels", self.n_mels)
        if self.subsampling not in SUBSAMPLING:
            raise config_error(
                "subsampling", self.subsampling, "expected 1 (none), 2 or 4 (stride-2 convolutions)"
            )
        check_positive_int("max_positions", self.max_positions)
        check_choice("head", self.head, HEADS)
        check_choice("pool", self.pool, POOLS)
        check_positive_int("num_labels", self.num_labels)
        if self.head == "ctc" and self.num_labels < 2:
            raise config_error(
                "num_labels", self.num_labels, "head='ctc' needs the blank (0) and >= 1 symbol"
            )

    def output_lengths(self, lengths: Tensor) -> Tensor:
        """Frames after subsampling of utterances of ``lengths`` input frames: ceil(T / s)
        (a stride-2, padding-1, width-3 convolution keeps ceil(T / 2))."""
        out = lengths
        for _ in range(self.subsampling.bit_length() - 1):
            out = torch.div(out + 1, 2, rounding_mode="floor")
        return out


class Subsampling(nn.Module):
    """(B, T, n_mels), mask (B, T) -> (B, ceil(T/s), D), mask (B, ceil(T/s)): a per-frame
    Linear (s = 1), or s = 2^k stride-2 Conv1d (kernel 3, padding 1) + GELU. Padding frames
    are zeroed before each convolution, so they read as the convolution's own zero padding."""

    def __init__(self, config: SpeechConfig) -> None:
        super().__init__()
        c = config
        self.factor = c.subsampling
        if c.subsampling == 1:
            self.proj: nn.Linear | None = nn.Linear(c.n_mels, c.dim)
            self.convs = nn.ModuleList()
        else:
            self.proj = None
            widths = [c.n_mels] + [c.dim] * (c.subsampling.bit_length() - 1)
            self.convs = nn.ModuleList(
                nn.Conv1d(a, b, kernel_size=3, stride=2, padding=1)
                for a, b in zip(widths[:-1], widths[1:], strict=True)
            )
        self.act = nn.GELU()

    def forward(self, x: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor | None]:
        if self.proj is not None:
            return self.proj(x), mask
        x = x.transpose(1, 2)  # (B, C, T): Conv1d's layout
        for conv in self.convs:
            if mask is not None:
                x = x * mask[:, None, :].to(x.dtype)
            x = self.act(conv(x))
            if mask is not None:  # a frame is real when the input frame at its stride is
                mask = mask[:, ::2]
        return x.transpose(1, 2), mask


class Speech(TfamModel):
    """``model(features (B, T, n_mels), attention_mask=(B, T))`` -> the head's output
    (:meth:`forward_head`) over the encoded frames (:meth:`forward_features`)."""

    config_class = SpeechConfig
    title = "speech encoder"
    inputs = "audio"
    tasks = ("frame-classification", "utterance-classification", "ctc")
    head_tasks = {
        "frames": "frame-classification",
        "utterance": "utterance-classification",
        "ctc": "ctc",
    }

    def __init__(self, config: SpeechConfig) -> None:
        super().__init__(config)
        c = config
        self.subsample = Subsampling(c)
        self.position = build_position(c, length=c.max_positions)
        self.pos_embed = self.position.make_table()  # (max_positions, D) when learned
        self.drop = nn.Dropout(c.dropout)
        self.encoder = TransformerStack(c)
        self.norm = make_norm(c.norm, c.dim, c.norm_eps) if c.norm_first else nn.Identity()
        pooled = 2 * c.dim if c.head == "utterance" and c.pool == "stats" else c.dim
        self.head = nn.Linear(pooled, c.num_labels) if c.head != "none" else None
        self.init_weights()

    def init_weights(self) -> None:
        # Linear layers truncated-normal; the convolutions keep PyTorch's (He-uniform) init,
        # drawn when they were built: at std 0.02 log-mel inputs would barely pass.
        super().init_weights()
        if self.pos_embed is not None:
            nn.init.normal_(self.pos_embed, std=self.config.init_std)

    def no_weight_decay(self) -> set[str]:
        return {"pos_embed"} if self.pos_embed is not None else set()

    def check_inputs(self, features: Tensor, attention_mask: Tensor | None) -> None:
        """One line for features of the wrong shape or a mask that does not fit them."""
        c = self.config
        if features.ndim != 3 or features.shape[-1] != c.n_mels or not features.is_floating_point():
            raise ValueError(
                f"features have shape {tuple(features.shape)} and dtype {features.dtype}; "
                f"expected float frames (B, T, n_mels={c.n_mels})"
            )
        if attention_mask is not None and attention_mask.shape != features.shape[:2]:
            raise ValueError(
                f"attention_mask has shape {tuple(attention_mask.shape)}; expected (B, T) = "
                f"{tuple(features.shape[:2])} with True or 1 = real frame"
            )

    def forward_features(
        self,
        features: Tensor,
        attention_mask: Tensor | None = None,
        return_attention: bool = False,
    ) -> Tensor | tuple[Tensor, AttentionWeights]:
        """features (B, T, n_mels); attention_mask (B, T), True/1 = real frame -> encoded
        frames after the final norm (B, T', D), T' = ceil(T / subsampling), padding frames
        zero [, :class:`AttentionWeights`: "encoder", depth x (B, H, T', T')]."""
        self.check_inputs(features, attention_mask)
        mask = attention_mask.bool() if attention_mask is not None else None
        x, mask = self.subsample(features, mask)
        length = x.shape[1]
        self.config.check_length(length, "the frames after subsampling")
        x = self.drop(self.position.add(x, TokenPositions(0, length), self.pos_embed))
        x, weights = self.encoder(
            x, mask=padding_mask(mask) if mask is not None else None, need_weights=return_attention
        )
        x = self.norm(x)
        if mask is not None:
            x = x * mask[..., None].to(x.dtype)
        if return_attention:
            return x, AttentionWeights("encoder", encoder=weights or [])
        return x

    def forward_head(self, hidden: Tensor) -> Tensor:
        """(B, T', D) -> logits: (B, s*T', K) "frames" (at the input frame rate), (B, K)
        "utterance" (pooled over the frames that are not all zero: the real ones), (B, T', K)
        "ctc"; the frames themselves for "none"."""
        head = self.config.head
        if self.head is None:
            return hidden
        if head == "utterance":
            return self.head(self.pool_frames(hidden))
        logits = self.head(hidden)
        if head == "frames" and self.config.subsampling > 1:
            logits = logits.repeat_interleave(self.config.subsampling, dim=1)
        return logits

    def pool_frames(self, hidden: Tensor) -> Tensor:
        """(B, T', D) -> (B, D) the mean of the real frames (those not all zero), or with
        ``pool="stats"`` (B, 2D) [mean ; standard deviation], each over the real frames:
        sigma = sqrt(mean((x - mu)^2) + 1e-5) (the epsilon keeps the gradient finite where a
        channel is constant, as in a one-frame utterance)."""
        real = (hidden != 0).any(dim=-1, keepdim=True).to(hidden.dtype)  # (B, T', 1)
        count = real.sum(dim=1).clamp(min=1.0)  # (B, 1)
        mean = (hidden * real).sum(dim=1) / count
        if self.config.pool == "mean":
            return mean
        var = (((hidden - mean[:, None]) * real) ** 2).sum(dim=1) / count
        return torch.cat([mean, torch.sqrt(var + 1e-5)], dim=-1)

    def example_inputs(self, batch_size: int = 2) -> tuple[Tensor, ...]:
        """Random frames (B, 12, n_mels) and a mask whose last row ends in 5 padding frames."""
        length = 12
        features = torch.randn(batch_size, length, self.config.n_mels)
        mask = torch.ones(batch_size, length, dtype=torch.bool)
        mask[-1, length - 5 :] = False
        features[~mask] = 0.0
        return features, mask


def _speech(name: str, description: str, **values: Any) -> None:
    register_preset(name, "speech", description, **values)


# The spoken-digit presets (tfam.data.sources.spoken_digits): 80 log-mel bands, 2x subsampling
# (20 ms output frames), D=144, 4 pre-norm blocks, truncated attention of 16 frames (320 ms)
# each side. Sized so that each benchmark trains within 45 minutes on 2 CPU cores.
_speech(
    "speech_digits_tag",
    "speech encoder for spoken digits, a label per 10 ms frame (word or phoneme): 80 mels, 2x "
    "conv subsampling, D=144, 4 blocks, local attention +-16 frames",
    head="frames",
    num_labels=11,
)
_speech(
    "speech_digits_speaker",
    "speech encoder for spoken digits, one speaker label per utterance (masked mean pool): 80 "
    "mels, 4x conv subsampling, D=144, 4 blocks, local attention +-16 frames",
    head="utterance",
    subsampling=4,
    num_labels=24,
)
_speech(
    "speech_digits_ctc",
    "speech encoder for spoken digits, CTC over the digits (transcription): 80 mels, 2x conv "
    "subsampling, D=144, 4 blocks, local attention +-16 frames",
    head="ctc",
    num_labels=11,
)
