"""BERT (Devlin et al. 2019), the bidirectional encoder, as the source documents describe it:

token ids (B, L), segment ids (B, L)
  -> token + segment + learned position embeddings       (B, L, D)
  -> LayerNorm -> dropout
  -> N x [ X1 = LN(X0 + MHSA(X0));  X_out = LN(X1 + MLP(X1)) ]   (post-norm, GELU)
     (``position`` may name any scheme over a sequence (:mod:`tfam.layers.position`): the
     learned table, BERT's and the default; "sinusoidal" added in its place; "rope" or
     "alibi" inside every self-attention, wired by the stack; or "none")
  -> head, chosen by ``config.head``:
       "none":     the hidden states                      (B, L, D)
       "mlm":      dense -> GELU -> LN -> decoder tied to the token embeddings (+ bias)
                                                          (B, L, V)
       "token":    dropout -> Linear, one label per token (B, L, num_labels)
       "sequence": pooler (dense + tanh on [CLS]) -> dropout -> Linear
                                                          (B, num_labels)

``attention_mask`` (B, L), True/1 = real token, hides padding keys. As in Hugging Face's
``BertModel``, no mask means every token is attended to (ids equal to ``pad_token_id`` are not
masked on their own).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from tfam.config import BaseConfig, check_bool, check_choice, check_positive_int, config_error
from tfam.layers import TransformerStack, make_norm, padding_mask
from tfam.layers.masks import masked_mean
from tfam.layers.position import TokenPositions, build_position
from tfam.models.base import AttentionWeights, TfamModel
from tfam.models.registry import register_preset

HEADS = ("none", "mlm", "token", "sequence")
# The MLM transform's activation; gated kinds have no single-input form.
_HEAD_ACTIVATIONS = {
    "gelu": lambda: nn.GELU(),
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
    "relu": lambda: nn.ReLU(),
    "silu": lambda: nn.SiLU(),
}


@dataclass
class BertConfig(BaseConfig):
    """BERT: embeddings (token + segment + position, LN) -> post-norm encoder -> ``head``.

    ``pooler`` (dense + tanh on [CLS]) is built when the head reads it ("sequence") unless set:
    ``pooler=True`` with another head keeps it for :meth:`Bert.pool` (Hugging Face's
    ``BertModel.pooler_output``).
    """

    family: ClassVar[str] = "bert"
    # Every scheme over a 1-D sequence; "learned" (BERT's, the default) keeps Hugging Face's
    # layout (embed.positions, an nn.Embedding) and is the only one the HF converter writes.
    position_domains: ClassVar[tuple[str, ...]] = ("sequence", "any")

    dim: int = 768
    depth: int = 12
    heads: int = 12
    ffn_dim: int | None = 3072
    activation: str = "gelu"  # exact (erf) GELU, as BERT
    norm_eps: float = 1e-12
    norm_first: bool = False
    dropout: float = 0.1
    attn_dropout: float = 0.1
    position: str = "learned"
    vocab_size: int = 30522
    max_positions: int = 512
    type_vocab_size: int = 2
    pad_token_id: int = 0
    head: str = "none"
    num_labels: int = 2
    pooler: bool | None = None  # None -> head == "sequence"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive_int("vocab_size", self.vocab_size)
        check_positive_int("max_positions", self.max_positions)
        check_positive_int("type_vocab_size", self.type_vocab_size)
        check_positive_int("pad_token_id", self.pad_token_id, allow_zero=True)
        if self.pad_token_id >= self.vocab_size:
            raise config_error(
                "pad_token_id",
                self.pad_token_id,
                f"expected an id below vocab_size={self.vocab_size}",
            )
        check_choice("head", self.head, HEADS)
        check_positive_int("num_labels", self.num_labels)
        if self.pooler is None:
            self.pooler = self.head == "sequence"
        check_bool("pooler", self.pooler)
        if self.head == "sequence" and not self.pooler:
            raise config_error(
                "pooler", self.pooler, "head='sequence' reads the pooled [CLS]: expected true"
            )
        if self.head == "mlm" and self.activation not in _HEAD_ACTIVATIONS:
            raise config_error(
                "activation",
                self.activation,
                f"head='mlm' applies it to one input in its transform; expected one of "
                f"{', '.join(map(repr, _HEAD_ACTIVATIONS))}",
            )


class BertEmbeddings(nn.Module):
    """ids (B, L), segment ids (B, L) -> LN(token + segment [+ position]) -> dropout (B, L, D).

    The position scheme is ``config.position``'s (``position``); a learned table is
    ``positions``, an ``nn.Embedding`` (max_positions, D) as in Hugging Face's BERT
    (``embeddings.position_embeddings``); a scheme acting in attention (rope, alibi) adds
    nothing here and the encoder stack wires it."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        c = config
        self.tokens = nn.Embedding(c.vocab_size, c.dim, padding_idx=c.pad_token_id)
        self.segments = nn.Embedding(c.type_vocab_size, c.dim)
        self.position = build_position(c, length=c.max_positions)
        self.positions = nn.Embedding(c.max_positions, c.dim) if self.position.learned else None
        self.norm = make_norm(c.norm, c.dim, c.norm_eps)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, ids: Tensor, token_type_ids: Tensor) -> Tensor:
        x = self.tokens(ids) + self.segments(token_type_ids)
        table = None if self.positions is None else self.positions.weight
        x = self.position.add(x, TokenPositions(0, ids.shape[1]), table)
        return self.dropout(self.norm(x))


class MaskedLMHead(nn.Module):
    """(B, L, D) -> dense -> activation -> LN -> decoder (tied to the token table) + bias
    -> (B, L, V)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        c = config
        self.dense = nn.Linear(c.dim, c.dim)
        self.act = _HEAD_ACTIVATIONS[c.activation]()
        self.norm = make_norm(c.norm, c.dim, c.norm_eps)
        self.decoder = nn.Linear(c.dim, c.vocab_size)

    def forward(self, x: Tensor) -> Tensor:
        return self.decoder(self.norm(self.act(self.dense(x))))


class Bert(TfamModel):
    """``model(input_ids, attention_mask=None, token_type_ids=None)`` -> the head's output
    (:meth:`forward_head`) over the hidden states (:meth:`forward_features`)."""

    config_class = BertConfig
    title = "BERT"
    inputs = "tokens"
    tasks = ("sequence-classification", "token-classification", "masked-lm")
    head_tasks = {
        "sequence": "sequence-classification",
        "token": "token-classification",
        "mlm": "masked-lm",
    }
    embeds = True

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        c = config
        self.embed = BertEmbeddings(c)
        self.encoder = TransformerStack(c)
        # Post-norm blocks end in a norm; pre-norm ones need one after the last block.
        self.norm = make_norm(c.norm, c.dim, c.norm_eps) if c.norm_first else nn.Identity()
        self.pooler = nn.Sequential(nn.Linear(c.dim, c.dim), nn.Tanh()) if c.pooler else None
        self.mlm: MaskedLMHead | None = MaskedLMHead(c) if c.head == "mlm" else None
        if c.head in ("token", "sequence"):
            self.head_dropout = nn.Dropout(c.dropout)
            self.classifier: nn.Linear | None = nn.Linear(c.dim, c.num_labels)
        else:
            self.classifier = None
        self.init_weights()
        if self.mlm is not None:
            self.mlm.decoder.weight = self.embed.tokens.weight

    def init_weights(self) -> None:
        super().init_weights()
        std = self.config.init_std
        for module in self.modules():
            if isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=std)
                if module.padding_idx is not None and module.weight.device.type != "meta":
                    with torch.no_grad():
                        module.weight[module.padding_idx].zero_()

    def check_inputs(
        self, input_ids: Tensor, attention_mask: Tensor | None, token_type_ids: Tensor | None
    ) -> None:
        """One clear line for ids outside the tables, wrong shapes or too long inputs."""
        c = self.config
        if input_ids.ndim != 2 or input_ids.dtype not in (torch.int64, torch.int32):
            raise ValueError(
                f"input_ids has shape {tuple(input_ids.shape)} and dtype {input_ids.dtype}; "
                "expected token ids (B, L) of int64"
            )
        # Only a learned table bounds the length; every other scheme runs past max_positions.
        c.check_length(input_ids.shape[1], "input_ids")
        for name, ids, size, field in (
            ("input_ids", input_ids, c.vocab_size, "vocab_size"),
            ("token_type_ids", token_type_ids, c.type_vocab_size, "type_vocab_size"),
        ):
            if ids is None or not ids.numel():
                continue
            if ids.shape != input_ids.shape:
                raise ValueError(
                    f"{name} has shape {tuple(ids.shape)}; expected input_ids' {tuple(input_ids.shape)}"
                )
            low, high = int(ids.min()), int(ids.max())
            if low < 0 or high >= size:
                raise ValueError(
                    f"{name} holds ids in [{low}, {high}]; expected 0 <= id < {field}={size}"
                )
        if attention_mask is not None and attention_mask.shape != input_ids.shape:
            raise ValueError(
                f"attention_mask has shape {tuple(attention_mask.shape)}; expected input_ids' "
                f"{tuple(input_ids.shape)} with True or 1 = real token"
            )

    def forward_features(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        return_attention: bool = False,
    ) -> Tensor | tuple[Tensor, AttentionWeights]:
        """input_ids (B, L); attention_mask (B, L), True/1 = real token; token_type_ids (B, L)
        segments (default 0) -> hidden states (B, L, D) [, :class:`AttentionWeights`:
        "encoder", depth x (B, H, L, L)]. ``forward`` takes the same arguments."""
        self.check_inputs(input_ids, attention_mask, token_type_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        mask = padding_mask(attention_mask) if attention_mask is not None else None
        x = self.embed(input_ids, token_type_ids)
        x, weights = self.encoder(x, mask=mask, need_weights=return_attention)
        x = self.norm(x)
        if return_attention:
            return x, AttentionWeights("encoder", encoder=weights or [])
        return x

    def pool(self, hidden: Tensor) -> Tensor:
        """The pooler: tanh(dense(hidden[:, 0])). (B, L, D) -> (B, D)."""
        if self.pooler is None:
            raise ValueError("this model has no pooler (config.pooler=False)")
        return self.pooler(hidden[:, 0])

    def forward_head(self, hidden: Tensor) -> Tensor:
        """(B, L, D) -> logits (B, L, V) for "mlm", (B, L, num_labels) for "token",
        (B, num_labels) for "sequence", the hidden states (B, L, D) for "none" (see the module
        docstring)."""
        head = self.config.head
        if head == "mlm":
            assert self.mlm is not None
            return self.mlm(hidden)
        if head == "token":
            assert self.classifier is not None
            return self.classifier(self.head_dropout(hidden))
        if head == "sequence":
            assert self.classifier is not None
            return self.classifier(self.head_dropout(self.pool(hidden)))
        return hidden

    def example_inputs(self, batch_size: int = 2) -> tuple[Tensor, ...]:
        """Random ids (B, L <= 8) and an attention mask whose last row ends in padding."""
        c = self.config
        length = min(8, c.max_positions)
        ids = torch.randint(0, c.vocab_size, (batch_size, length))
        mask = torch.ones(batch_size, length, dtype=torch.bool)
        mask[-1, length // 2 + 1 :] = False
        ids[~mask] = c.pad_token_id
        return ids, mask


def mean_pool(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """The mean of each row's real tokens (sentence-transformers' mean pooling).
    hidden (B, L, D), attention_mask (B, L) True/1 = real -> (B, D)."""
    return masked_mean(hidden, attention_mask)  # an all-padding row gives zeros, not NaN


def _bert(name: str, description: str, **values: Any) -> None:
    register_preset(name, "bert", description, **values)


# Pre-training shape: the MLM head (no pooler), so every weight of a preset is trained.
_bert(
    "bert_base",
    "BERT-Base (110M): D=768, 12 blocks, H=12, FFN 3072, 30522 WordPiece ids, MLM head",
    head="mlm",
)
_bert(
    "bert_large",
    "BERT-Large (335M): D=1024, 24 blocks, H=16, FFN 4096, 30522 WordPiece ids, MLM head",
    dim=1024,
    depth=24,
    heads=16,
    ffn_dim=4096,
    head="mlm",
)
_bert(
    "minilm_l6",
    "MiniLM-L6-H384 (the packaged all-MiniLM-L6-v2 encoder, 22.6M without its pooler): D=384, 6 blocks, H=12, "
    "FFN 1536, hidden states out (mean-pool them for a sentence embedding)",
    dim=384,
    depth=6,
    heads=12,
    ffn_dim=1536,
)
