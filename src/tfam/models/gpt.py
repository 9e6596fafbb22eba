"""GPT (Radford et al. 2018, 2019): a decoder-only, causal Transformer that predicts the next
token, as the source documents contrast it with BERT:

token ids (B, L)
  -> token embedding + learned position embedding, dropout
  -> N x [ X1 = X0 + MaskedMHSA(LN(X0));  X_out = X1 + MLP(LN(X1)) ]   (pre-norm, GELU)
  -> final LN -> Linear to the vocabulary (its weight is the token embedding: tied)

Token i sees tokens 0..i only, so the logits at i are the model's guess for token i + 1.
A batch of prompts of different lengths is left-padded: ``attention_mask`` (B, L), True = real
token, hides the padding, and each row's positions start at its first real token (Hugging
Face's ``position_ids = cumsum(attention_mask) - 1``), so a padded prompt gives the same
logits as the prompt alone. ``position`` may name any scheme over a sequence
(:mod:`tfam.layers.position`): a table added to the tokens ("learned", GPT-2's; "sinusoidal"),
or one acting inside attention, wired by the stack ("rope", "alibi"), or "none".
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from tfam.config import BaseConfig, check_bool, check_positive_int, config_error
from tfam.generation import DecodingState, GenerationMixin
from tfam.layers import TransformerStack, make_norm
from tfam.layers.position import TokenPositions, build_position
from tfam.models.base import AttentionWeights, TfamModel
from tfam.models.registry import register_preset


@dataclass
class GPTConfig(BaseConfig):
    """A decoder-only language model; the defaults are GPT-2 (124M)'s shape. ``max_positions`` is the
    context: the length it trains at, the rows of a learned position table and so the longest
    sequence one forward takes with ``position='learned'`` (every other scheme runs past it);
    ``generate`` slides past it, reading the last ``max_positions`` tokens at each step.
    Special ids may be None (GPT-2 has no padding token)."""

    family: ClassVar[str] = "gpt"
    # Every scheme over a 1-D sequence: the tokens' positions are counted per row.
    position_domains: ClassVar[tuple[str, ...]] = ("sequence", "any")

    dim: int = 768
    depth: int = 12
    heads: int = 12
    ffn_dim: int | None = None  # None -> 4 * dim
    activation: str = "gelu_tanh"
    norm_eps: float = 1e-5
    norm_first: bool = True
    dropout: float = 0.1
    attn_dropout: float = 0.1
    position: str = "learned"
    init_std: float = 0.02
    vocab_size: int = 50257
    max_positions: int = 1024
    pad_token_id: int | None = None
    bos_token_id: int | None = None  # GPT-2's presets: 50256 (<|endoftext|>)
    eos_token_id: int | None = None
    tie_output: bool = True  # the LM head's weight is the token embedding
    final_norm: bool = True  # LN after the last block (GPT-2; pre-norm stacks need it)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive_int("vocab_size", self.vocab_size)
        check_positive_int("max_positions", self.max_positions)
        for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
            value = getattr(self, name)
            if value is None:
                continue
            check_positive_int(name, value, allow_zero=True)
            if value >= self.vocab_size:
                raise config_error(
                    name, value, f"expected None or an id below vocab_size={self.vocab_size}"
                )
        for name in ("tie_output", "final_norm"):
            check_bool(name, getattr(self, name))


class GPT(GenerationMixin, TfamModel):
    """``model(input_ids, attention_mask=None)`` -> next-token logits (B, L, V);
    ``model.generate(input_ids, ...)`` continues prompts (greedy, sampling, beam search, with
    or without the KV cache: :mod:`tfam.generation`)."""

    config_class = GPTConfig
    title = "GPT"
    inputs = "tokens"
    tasks = ("causal-lm",)
    generates = True
    # Keep the decoding layout of the weights (see :meth:`decoding_context`) between
    # ``generate`` calls: it costs one more copy of the matrices in memory, and remaking it
    # costs about as much as a few decoded tokens. False: made per call and dropped after.
    keep_decoding_weights: bool = True

    def __init__(self, config: GPTConfig) -> None:
        super().__init__(config)
        c = config
        self.tok_embed = nn.Embedding(c.vocab_size, c.dim)
        self.position = build_position(c, length=c.max_positions)
        self.pos_embed = self.position.make_table()  # (max_positions, D) when learned
        self.drop = nn.Dropout(c.dropout)
        self.stack = TransformerStack(c, causal=True)
        self.norm = make_norm(c.norm, c.dim, c.norm_eps) if c.final_norm else nn.Identity()
        self.lm_head = nn.Linear(c.dim, c.vocab_size, bias=False)
        self.init_weights()
        if c.tie_output:
            self.lm_head.weight = self.tok_embed.weight

    def init_weights(self) -> None:
        super().init_weights()
        c = self.config
        nn.init.normal_(self.tok_embed.weight, std=c.init_std)
        if self.pos_embed is not None:
            nn.init.normal_(self.pos_embed, std=c.init_std)
        # GPT-2: the projections that write into the residual stream start smaller, by
        # 1/sqrt(2N), so the stream's variance does not grow with depth.
        std = c.init_std / math.sqrt(2 * max(c.depth, 1))
        for block in self.stack.blocks:
            for linear in (block.mhsa.out_proj, block.mlp.fc2):
                nn.init.trunc_normal_(linear.weight, std=std, a=-2 * std, b=2 * std)

    def no_weight_decay(self) -> set[str]:
        return {"pos_embed"} if self.pos_embed is not None else set()

    # -- checks ----------------------------------------------------------------------------
    def check_ids(self, ids: Tensor, name: str = "input_ids") -> None:
        if ids.ndim != 2 or ids.dtype not in (torch.int64, torch.int32):
            raise ValueError(
                f"{name} has shape {tuple(ids.shape)} and dtype {ids.dtype}; expected token ids "
                "(B, L) of int64"
            )
        v = self.config.vocab_size
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= v):
            raise ValueError(
                f"{name} holds ids in [{int(ids.min())}, {int(ids.max())}]; expected ids in "
                f"[0, {v}) (vocab_size={v})"
            )

    def _check_mask(self, attention_mask: Tensor | None, ids: Tensor) -> Tensor | None:
        """(B, L) True/1 = real token -> bool (B, L), or None when every token is real (the
        fused causal kernel then runs)."""
        if attention_mask is None:
            return None
        if attention_mask.shape != ids.shape:
            raise ValueError(
                f"attention_mask has shape {tuple(attention_mask.shape)}; expected the shape of "
                f"input_ids {tuple(ids.shape)} with True or 1 = real token"
            )
        mask = attention_mask.bool()
        return None if bool(mask.all()) else mask

    # -- the network -----------------------------------------------------------------------
    def token_positions(self, length: int, offset: int, key_mask: Tensor | None) -> TokenPositions:
        """Where ``length`` new tokens sit after ``offset`` cached ones: with a key mask
        (left padding), per row from its first real token."""
        return TokenPositions.count(length, offset, key_mask)

    def _hidden(
        self,
        ids: Tensor,
        key_mask: Tensor | None,
        cache: Any = None,
        need_weights: bool = False,
        layers: int | None = None,
    ) -> tuple[Tensor, list[Any] | None]:
        """ids (B, n) (the new tokens when cached); key_mask (B, Lk) over every key so far or
        None -> final-normed hidden states (B, n, D), weights. ``layers=l``: the output of the
        first l blocks, put through the final norm (a middle layer's features)."""
        offset = cache.position if cache is not None else 0
        n = ids.shape[1]
        # Only a learned table bounds the length; every other scheme runs past max_positions.
        self.config.check_length(offset + n, "the sequence")
        positions = self.token_positions(n, offset, key_mask)  # once per forward
        x = self.drop(self.position.add(self.tok_embed(ids), positions, self.pos_embed))
        x, weights = self.stack(
            x,
            mask=None if key_mask is None else key_mask[:, None, None, :],
            cache=cache,
            positions=positions,
            need_weights=need_weights,
            layers=layers,
        )
        return self.norm(x), weights

    def forward_features(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        return_attention: bool = False,
    ) -> Tensor | tuple[Tensor, AttentionWeights]:
        """input_ids (B, L), attention_mask (B, L), True/1 = real token (left padding;
        positions start at each row's first real token) -> final-normed hidden states
        (B, L, D) (Hugging Face's ``last_hidden_state``) [, :class:`AttentionWeights`:
        "decoder", N x (B, H, L, L)]. ``forward`` takes the same arguments."""
        self.check_ids(input_ids)
        mask = self._check_mask(attention_mask, input_ids)
        x, weights = self._hidden(input_ids, mask, need_weights=return_attention)
        if return_attention:
            return x, AttentionWeights("decoder", decoder=weights or [])
        return x

    def forward_head(self, hidden: Tensor) -> Tensor:
        """Final-normed hidden states (B, L, D) -> next-token logits (B, L, V): at position i,
        the scores of token i + 1."""
        return self.lm_head(hidden)

    # -- decoding (tfam.generation) --------------------------------------------------------
    def prepare_decoding(
        self, input_ids: Tensor, attention_mask: Tensor | None, max_new_tokens: int, use_cache: bool
    ) -> tuple[DecodingState, Tensor]:
        """A prompt and its continuation may exceed the context (``max_positions``): past it,
        each step reads the last ``max_positions`` tokens (:meth:`decoding_window`), so the
        cache holds at most that many positions (none when the prompt alone exceeds it)."""
        self.check_ids(input_ids)
        length, limit = input_ids.shape[1], self.config.max_positions
        mask = self._check_mask(attention_mask, input_ids)
        cache = None
        if use_cache and length <= limit:
            cache = self.stack.make_cache(min(length + max_new_tokens, limit))
        return DecodingState(cache=cache, key_mask=mask), input_ids

    def decoding_window(self) -> int:
        """The context, max_positions: generation past it slides (:mod:`tfam.generation`)."""
        return self.config.max_positions

    def _decoding_copies(self) -> dict[str, Tensor]:
        """{name: the parameter's values in (in, out) storage, seen as (out, in)} for every
        weight matrix the decoder multiplies by (the stack's and the LM head's)."""
        params = {n: p for n, p in self.named_parameters() if p.ndim == 2 and n != "pos_embed"}
        # A parameter changed in place bumps its version; one replaced has a new storage.
        key = tuple((n, p.data_ptr(), p._version, p.dtype, p.shape) for n, p in params.items())
        kept = self.__dict__.get("_decoding_copies_kept")
        if kept is not None and kept[0] == key:
            return kept[1]
        self.__dict__.pop("_decoding_copies_kept", None)  # free stale copies before copying
        # Ordinary tensors even when generate runs under inference_mode: they replace
        # parameters' data, which inference tensors may not.
        with torch.inference_mode(False), torch.no_grad():
            copies = {n: p.detach().t().contiguous().t() for n, p in params.items()}
        if self.keep_decoding_weights:
            self.__dict__["_decoding_copies_kept"] = (key, copies)
        return copies

    @contextmanager
    def decoding_context(self) -> Iterator[None]:
        """Lays the weight matrices out for decoding on the CPU while ``generate`` runs, and
        back after (even on an error); nothing off the CPU.

        Decoding multiplies one row per sequence by every matrix: a matrix-vector product,
        bound by reading the weights from memory. On the CPU, torch's BLAS reads a matrix
        stored (in, out) faster than nn.Linear's (out, in) for that product (measured by
        benchmarks/bench_gpt.py); a GPU's is fast either way. The parameters keep their values, shape
        and names (only their strides change), so the tokens are the same; only the order of
        the float additions inside a product changes. The copies are kept between calls while
        the parameters are unchanged (``keep_decoding_weights``)."""
        if self.lm_head.weight.device.type != "cpu":
            yield
            return
        copies = self._decoding_copies()
        params = dict(self.named_parameters())
        originals = {n: params[n].data for n in copies}
        try:
            for n, t in copies.items():
                params[n].data = t
            yield
        finally:
            for n, t in originals.items():
                params[n].data = t

    def decode_step(self, state: DecodingState, ids: Tensor) -> Tensor:
        x, _ = self._hidden(ids, state.key_mask, cache=state.cache)
        return self.lm_head(x[:, -1])

    def example_inputs(self, batch_size: int = 2) -> tuple[Tensor, ...]:
        """Random ids (B, min(8, max_positions)), no padding."""
        c = self.config
        return (torch.randint(0, c.vocab_size, (batch_size, min(8, c.max_positions))),)


def _gpt(name: str, description: str, **values: Any) -> None:
    register_preset(name, "gpt", description, **values)


_gpt(
    "gpt2",
    "GPT-2 small (124M): D=768, H=12, N=12, 1024 positions, 50257 BPE ids, GELU (tanh), "
    "pre-norm, tied LM head",
    bos_token_id=50256,
    eos_token_id=50256,
)
_gpt(
    "gpt2_medium",
    "GPT-2 medium (355M): D=1024, H=16, N=24, 1024 positions, 50257 BPE ids",
    dim=1024,
    heads=16,
    depth=24,
    bos_token_id=50256,
    eos_token_id=50256,
)
_gpt(
    "gpt_char_small",
    "character-level GPT that trains on 2 CPU cores: D=128, H=4, N=4, context 128, 128 ids",
    dim=128,
    heads=4,
    depth=4,
    vocab_size=128,
    max_positions=128,
    dropout=0.0,
    attn_dropout=0.0,
)
