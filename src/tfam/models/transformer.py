"""The encoder–decoder Transformer (Vaswani et al. 2017), as the source documents walk through it:

source ids (B, Ls)                                target ids (B, Lt), starting with <bos>
  -> embedding x sqrt(D) + sinusoidal position      -> embedding x sqrt(D) + sinusoidal position
  -> N x [ X1 = LN(X0 + MHSA(X0));                  -> N x [ X1 = LN(X0 + MaskedMHSA(X0));
           X_out = LN(X1 + FFN(X1)) ]                       X2 = LN(X1 + CrossAttn(X1, M));
  = memory M (B, Ls, D)                                      X_out = LN(X2 + FFN(X2)) ]
                                                    -> Linear -> softmax over the vocabulary

PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(pos / 10000^(2i/D)), from pos 0.
``position`` may name any scheme over a sequence (:mod:`tfam.layers.position`): a table added
to the tokens ("sinusoidal", the paper's and the default; "learned"), or one acting in the
self-attention of both stacks ("rope", "alibi"; cross-attention gets no positions), or "none".
Only a learned table bounds the length (``max_positions``); the others run past it.
Padding (``pad_token_id``) is masked on both sides; the decoder cannot see the future. Post-norm
blocks as in the paper (``norm_first=True`` for pre-norm); the source, target and output
embeddings may share one matrix (``share_embeddings``, ``tie_output``). For Marian
(:mod:`tfam.interop.hf_marian`): ``sinusoid_layout="halves"`` (all sines, then all cosines) and
``logits_bias`` (a fixed bias added to the logits, a buffer like Marian's final_logits_bias).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from tfam.config import BaseConfig, check_bool, check_choice, check_positive_int, config_error
from tfam.generation import DecodingState, GenerationMixin
from tfam.layers import TransformerStack, make_norm, pad_token_mask
from tfam.layers.position import TokenPositions, build_position
from tfam.models.base import AttentionWeights, TfamModel
from tfam.models.registry import register_preset


@dataclass
class TransformerConfig(BaseConfig):
    """The encoder–decoder. ``depth`` blocks in each stack unless ``decoder_depth`` differs;
    ``vocab_size`` is the joint (source and target) vocabulary of one tokenizer."""

    family: ClassVar[str] = "transformer"
    # Every scheme over a 1-D sequence: tables added to the source and target tokens
    # ("sinusoidal", the paper's; "learned"), or acting inside the self-attention of the
    # encoder and of the decoder ("rope", "alibi"; positions counted on each side from 0).
    # Cross-attention gets none: its keys are the source's tokens, whose positions the
    # encoder has already mixed into them, and a query's target position and a key's source
    # position are not on one axis (no relative distance between them means anything).
    position_domains: ClassVar[tuple[str, ...]] = ("sequence", "any")

    dim: int = 512
    depth: int = 6
    heads: int = 8
    ffn_dim: int | None = 2048
    activation: str = "relu"
    norm_eps: float = 1e-5
    norm_first: bool = False
    dropout: float = 0.1
    position: str = "sinusoidal"
    init_std: float = 0.02
    decoder_depth: int | None = None  # None -> depth
    vocab_size: int = 32000
    max_positions: int = 512
    pad_token_id: int = 0
    bos_token_id: int = 1
    eos_token_id: int = 2
    share_embeddings: bool = True  # one matrix for source and target tokens
    tie_output: bool = True  # the output projection is the target embedding (transposed)
    final_norm: bool | None = None  # None -> True with pre-norm blocks, False with post-norm
    scale_embeddings: bool = True  # multiply embeddings by sqrt(D), as in the paper
    sinusoid_layout: str = "interleaved"  # sin/cos alternate; "halves": sines, then cosines
    logits_bias: bool = False  # a fixed (V,) buffer added to the logits (Marian)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.decoder_depth is None:
            self.decoder_depth = self.depth
        check_positive_int("decoder_depth", self.decoder_depth, allow_zero=True)
        check_positive_int("vocab_size", self.vocab_size)
        check_positive_int("max_positions", self.max_positions)
        for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
            value = getattr(self, name)
            check_positive_int(name, value, allow_zero=True)
            if value >= self.vocab_size:
                raise config_error(
                    name, value, f"expected an id below vocab_size={self.vocab_size}"
                )
        if self.final_norm is None:
            self.final_norm = bool(self.norm_first)
        for name in (
            "share_embeddings",
            "tie_output",
            "final_norm",
            "scale_embeddings",
            "logits_bias",
        ):
            check_bool(name, getattr(self, name))
        check_choice("sinusoid_layout", self.sinusoid_layout, ("interleaved", "halves"))


class TokenEmbedding(nn.Module):
    """Token ids (B, L) -> (B, L, D): lookup x sqrt(D) + position (the scheme of
    ``config.position``; a learned table is this module's ``pos_embed``), then dropout."""

    def __init__(
        self, config: TransformerConfig, tokens: nn.Embedding, side: str = "the sequence"
    ) -> None:
        super().__init__()
        self.tokens = tokens
        self.scale = math.sqrt(config.dim) if config.scale_embeddings else 1.0
        self.config, self.side = config, side  # side: how a length error names the sequence
        self.position = build_position(config, length=config.max_positions)
        self.pos_embed = self.position.make_table()  # (max_positions, D) when learned
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, ids: Tensor, positions: TokenPositions | None = None) -> Tensor:
        """ids (B, L) -> (B, L, D); ``positions`` default ``0..L-1`` (after a cache: its
        offset)."""
        if positions is None:
            positions = TokenPositions(0, ids.shape[1])
        # Only a learned table bounds the length; every other scheme runs past max_positions.
        self.config.check_length(positions.offset + positions.length, self.side)
        x = self.tokens(ids) * self.scale
        return self.dropout(self.position.add(x, positions, self.pos_embed))


class Transformer(GenerationMixin, TfamModel):
    """``model(src_ids, tgt_ids, src_mask=None, tgt_mask=None)`` -> logits (B, Lt, V) of the
    next target token (:meth:`forward_features`, then the LM head); ``model.generate(src_ids,
    ...)`` translates (:mod:`tfam.generation`)."""

    config_class = TransformerConfig
    title = "Transformer"
    inputs = "token-pairs"
    tasks = ("seq2seq",)
    generates = True

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__(config)
        c = config
        src_tokens = nn.Embedding(c.vocab_size, c.dim)
        tgt_tokens = src_tokens if c.share_embeddings else nn.Embedding(c.vocab_size, c.dim)
        self.src_embed = TokenEmbedding(c, src_tokens, "the source")
        self.tgt_embed = TokenEmbedding(c, tgt_tokens, "the target")
        self.encoder = TransformerStack(c, kind="encoder")
        self.decoder = TransformerStack(c.replace(depth=c.decoder_depth), kind="decoder")
        self.encoder_norm = make_norm(c.norm, c.dim, c.norm_eps) if c.final_norm else nn.Identity()
        self.decoder_norm = make_norm(c.norm, c.dim, c.norm_eps) if c.final_norm else nn.Identity()
        self.lm_head = nn.Linear(c.dim, c.vocab_size, bias=False)
        if c.logits_bias:
            # A buffer, not a parameter: Marian's final_logits_bias is not trained either.
            self.register_buffer("logits_bias", torch.zeros(c.vocab_size))
        self.init_weights()
        if c.tie_output:
            self.lm_head.weight = tgt_tokens.weight

    def init_weights(self) -> None:
        super().init_weights()
        c = self.config
        std = c.init_std
        # Embeddings scaled by sqrt(D) start at unit size, like the sinusoids they are added to
        # (N(0, D^-0.5), as fairseq's Transformer); at init_std=0.02 the positions would drown
        # the tokens and training starts slowly.
        embed_std = c.dim**-0.5 if c.scale_embeddings else std
        for module in self.modules():
            if isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=embed_std)
            if isinstance(module, TokenEmbedding) and module.pos_embed is not None:
                nn.init.normal_(module.pos_embed, std=std)

    def no_weight_decay(self) -> set[str]:
        return {"src_embed.pos_embed", "tgt_embed.pos_embed"}

    def check_ids(self, ids: Tensor, name: str) -> None:
        if ids.ndim != 2 or ids.dtype not in (torch.int64, torch.int32):
            raise ValueError(
                f"{name} has shape {tuple(ids.shape)} and dtype {ids.dtype}; expected token ids (B, L) of int64"
            )
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.config.vocab_size):
            raise ValueError(
                f"{name} holds ids in [{int(ids.min())}, {int(ids.max())}]; expected 0 <= id < "
                f"vocab_size={self.config.vocab_size}"
            )

    def encode(
        self, src_ids: Tensor, src_mask: Tensor | None = None, return_attention: bool = False
    ) -> tuple[Tensor, Tensor | None, list[Tensor] | None]:
        """(B, Ls) -> memory (B, Ls, D), its key mask (B, 1, 1, Ls) or None, weights."""
        self.check_ids(src_ids, "src_ids")
        mask = (
            src_mask[:, None, None, :].bool()
            if src_mask is not None
            else pad_token_mask(src_ids, self.config.pad_token_id)
        )
        positions = TokenPositions(0, src_ids.shape[1])
        x, weights = self.encoder(
            self.src_embed(src_ids, positions),
            mask=mask,
            positions=positions,
            need_weights=return_attention,
        )
        return self.encoder_norm(x), mask, weights

    def decode_hidden(
        self,
        tgt_ids: Tensor,
        memory: Tensor | None,
        memory_mask: Tensor | None,
        tgt_mask: Tensor | None = None,
        cache: Any = None,
        return_attention: bool = False,
        mask_padding: bool = True,
    ) -> tuple[Tensor, list[Any] | None]:
        """(B, Lt) target ids (the new ones when cached) -> decoder hidden states after the
        final norm (B, Lt, D), weights (per block: (self, cross) or None).
        Without ``tgt_mask``, ids equal to ``pad_token_id`` are masked when ``mask_padding``
        (decoding passes False: its target holds no padding that later tokens may not see);
        when ``bos_token_id == pad_token_id`` (Marian) the first id is the start token, kept."""
        self.check_ids(tgt_ids, "tgt_ids")
        positions = TokenPositions(cache.position if cache is not None else 0, tgt_ids.shape[1])
        x = self.tgt_embed(tgt_ids, positions)
        self_mask = None
        if tgt_mask is not None:
            self_mask = tgt_mask[:, None, None, :].bool()
        elif cache is None and mask_padding:
            self_mask = pad_token_mask(tgt_ids, self.config.pad_token_id)
            if self_mask is not None and self.config.bos_token_id == self.config.pad_token_id:
                # Marian starts the target with the pad id: the first token is the start token.
                self_mask[..., 0] = True
                self_mask = None if bool(self_mask.all()) else self_mask
        x, weights = self.decoder(
            x,
            mask=self_mask,
            memory=memory,
            memory_mask=memory_mask,
            cache=cache,
            positions=positions,
            need_weights=return_attention,
        )
        return self.decoder_norm(x), weights

    def decode(self, *args: Any, **kwargs: Any) -> tuple[Tensor, list[Any] | None]:
        """:meth:`decode_hidden` (the same arguments), then the LM head: -> logits
        (B, Lt, V), weights."""
        hidden, weights = self.decode_hidden(*args, **kwargs)
        return self.forward_head(hidden), weights

    def forward_features(
        self,
        src_ids: Tensor,
        tgt_ids: Tensor,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        return_attention: bool = False,
    ) -> Tensor | tuple[Tensor, AttentionWeights]:
        """The features of an encoder–decoder are the decoder's: src_ids (B, Ls) are encoded,
        tgt_ids (B, Lt) (the target shifted right: <bos> y1 ... ) decoded over them -> decoder
        hidden states after the final norm (B, Lt, D). Masks (B, L), True = real token; by
        default every id equal to ``pad_token_id`` is padding. With ``return_attention`` also
        :class:`AttentionWeights`: main "decoder" (self-attention, N x (B, H, Lt, Lt)),
        "encoder" (N x (B, H, Ls, Ls)) and "cross" (N x (B, H, Lt, Ls)). ``forward`` takes the
        same arguments and gives the logits (B, Lt, V) of the next target token at each
        position."""
        memory, memory_mask, enc_w = self.encode(src_ids, src_mask, return_attention)
        hidden, dec_w = self.decode_hidden(
            tgt_ids, memory, memory_mask, tgt_mask, None, return_attention
        )
        if return_attention:
            pairs = dec_w or []
            weights = AttentionWeights(
                "decoder",
                encoder=enc_w or [],
                decoder=[s for s, _ in pairs],
                cross=[c for _, c in pairs],
            )
            return hidden, weights
        return hidden

    def forward_head(self, hidden: Tensor) -> Tensor:
        """The LM projection: decoder hidden states (B, Lt, D) -> logits (B, Lt, V) (plus the
        fixed ``logits_bias`` when the config has one, as Marian's final_logits_bias)."""
        logits = self.lm_head(hidden)
        if self.config.logits_bias:
            logits = logits + self.logits_bias
        return logits

    # -- decoding (tfam.generation) --------------------------------------------------------
    def prepare_decoding(
        self, input_ids: Tensor, attention_mask: Tensor | None, max_new_tokens: int, use_cache: bool
    ) -> tuple[DecodingState, Tensor]:
        limit = self.config.max_positions
        if self.tgt_embed.position.bounds_length and max_new_tokens + 1 > limit:
            raise ValueError(
                f"max_new_tokens={max_new_tokens} is invalid: the decoder has max_positions="
                f"{limit}, which bounds position={self.config.position!r}, so at most "
                f"{limit - 1} new tokens follow <bos> (other schemes run past it)"
            )
        memory, memory_mask, _ = self.encode(input_ids, attention_mask)
        cache = self.decoder.make_cache(max_new_tokens + 1) if use_cache else None
        state = DecodingState(cache=cache, extras={"memory": memory, "memory_mask": memory_mask})
        start = torch.full(
            (input_ids.shape[0], 1),
            self.config.bos_token_id,
            dtype=torch.long,
            device=input_ids.device,
        )
        return state, start

    def decode_step(self, state: DecodingState, ids: Tensor) -> Tensor:
        memory = state.extras["memory"]
        if state.cache is not None and state.cache.position > 0:
            memory = None  # the cross-attention keys and values are cached
        logits, _ = self.decode(
            ids,
            memory,
            state.extras["memory_mask"],
            cache=state.cache,
            mask_padding=False,  # no mask: the causal self-attention takes torch's fused path
        )
        return logits[:, -1]

    def example_inputs(self, batch_size: int = 2) -> tuple[Tensor, ...]:
        """Random source (B, 7) and target (B, 5) ids, no padding."""
        c = self.config
        low = max(c.pad_token_id, c.bos_token_id, c.eos_token_id) + 1
        high = max(low + 1, c.vocab_size)
        src = torch.randint(low, high, (batch_size, 7))
        tgt = torch.randint(low, high, (batch_size, 5))
        tgt[:, 0] = c.bos_token_id
        return src, tgt


def _transformer(name: str, description: str, **values: Any) -> None:
    register_preset(name, "transformer", description, **values)


_transformer(
    "transformer_base",
    "the base Transformer of Vaswani et al. 2017: D=512, H=8, N=6, d_ff=2048, post-norm",
    dim=512,
    heads=8,
    depth=6,
    ffn_dim=2048,
)
_transformer(
    "transformer_big",
    "the big Transformer of Vaswani et al. 2017: D=1024, H=16, N=6, d_ff=4096, dropout 0.3",
    dim=1024,
    heads=16,
    depth=6,
    ffn_dim=4096,
    dropout=0.3,
)
_transformer(
    "transformer_tiny",
    "small pre-norm encoder–decoder that trains on 2 CPU cores: D=128, H=4, N=3, d_ff=512, "
    "8k vocabulary",
    dim=128,
    heads=4,
    depth=3,
    ffn_dim=512,
    vocab_size=8000,
    norm_first=True,
    max_positions=256,
)
