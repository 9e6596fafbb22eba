"""The encoder-decoder Transformer's own rows: token embedding and position for the source,
the encoder stack, the same for the target, the decoder stack (masked self-attention,
cross-attention over the encoder output, MLP), the LM head.

Symbols: Ls source tokens, Lt target tokens (both ``seq_len``, by default ``max_positions``:
the longest sequence the model takes), V vocabulary, plus the bricks' D, H, Dh, F.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from tfam.explain.api import FamilyExplainer, register_family
from tfam.explain.blocks import stack_rows
from tfam.explain.bricks import Explainer, brick_symbols, norm_row, position_network_flops
from tfam.explain.table import ExplainRow
from tfam.explain.trace import is_identity, linear_flops, numel
from tfam.models.transformer import Transformer


@register_family("transformer")
class TransformerExplainer(FamilyExplainer):
    model_class = Transformer
    takes_seq_len = True

    def symbols(self) -> dict[str, int]:
        c = self.model.config
        n = self.tokens()
        return {"Ls": n, "Lt": n, "V": c.vocab_size, **brick_symbols(c)}

    def inputs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        c = self.model.config
        # Ids stay real (the model checks their range); no id is padding, so no row is masked
        # out. The embedding lookups run on meta weights like everything else.
        real = (c.pad_token_id + 1) % c.vocab_size
        ids = torch.full((self.batch, self.tokens()), real, dtype=torch.long)
        return (ids, ids.clone()), self.attention_kwargs()

    def _embedding(self, ex: Explainer, embed: nn.Module, side: str, L: str) -> list[ExplainRow]:
        call, c = ex.trace.call(embed), self.model.config
        ids, out = call.inputs[0], call.output
        shared = side == "target" and c.share_embeddings
        scale = f", times sqrt(D) = {math.sqrt(c.dim):.4g}" if c.scale_embeddings else ""
        lookup = ExplainRow(
            f"token embedding ({side})", ids, out, L, f"{L} x D",
            0 if shared else ex.claim(f"{side} embedding", embed.tokens),
            numel(out) if c.scale_embeddings else 0,
            note=f"each id's row of the V x D = {c.vocab_size} x {c.dim} table{scale}"
            + ("; the table is the source's (shared)" if shared else ""),
        )  # fmt: skip
        if embed.position.acts != "tokens":  # rope, alibi: the stacks' attention rows
            return [lookup]
        position = ExplainRow(
            f"+ position ({side})", out, out, f"{L} x D", f"{L} x D",
            ex.claim(f"{side} position", embed.pos_embed, embed.position),
            numel(out) + position_network_flops(ex, embed.position),
            note=f"{embed.position.describe()}, positions 0..{L}-1",
        )  # fmt: skip
        return [lookup, position]

    def _final_norm(self, ex: Explainer, norm: nn.Module, step: str, L: str) -> list[ExplainRow]:
        return [] if is_identity(norm) else [norm_row(ex, norm, "", step, L)]

    def rows(self, ex: Explainer) -> list[ExplainRow]:
        m, c = self.model, self.model.config
        head_in, logits = ex.trace.call(m.lm_head).inputs[0], ex.trace.call(m.lm_head).output
        tied = m.lm_head.weight is m.tgt_embed.tokens.weight
        head = ExplainRow(
            "LM head", head_in, logits, "Lt x D", "Lt x V",
            0 if tied else ex.claim("LM head", m.lm_head), linear_flops(m.lm_head, head_in),
            note=f"Linear to V = {c.vocab_size} next-token logits"
            + ("; its weight is the target embedding's (tied)" if tied else ""),
        )  # fmt: skip
        return [
            *self._embedding(ex, m.src_embed, "source", "Ls"),
            *stack_rows(ex, m.encoder, "Ls", label="enc "),
            *self._final_norm(ex, m.encoder_norm, "encoder final LN", "Ls"),
            *self._embedding(ex, m.tgt_embed, "target", "Lt"),
            *stack_rows(ex, m.decoder, "Lt", memory="Ls", label="dec "),
            *self._final_norm(ex, m.decoder_norm, "decoder final LN", "Lt"),
            head,
        ]

    def header(self, name: str) -> list[str]:
        c, e = self.model.config, self.symbols()
        scheme = self.model.src_embed.position
        norm = "pre" if c.norm_first else "post"
        return [
            f"{name}: encoder-decoder Transformer, batch size {self.batch}",
            f"{self.length_line('Ls = Lt')}, V = {e['V']} ids "
            f"(embeddings {'shared' if c.share_embeddings else 'separate'}, output "
            f"{'tied' if c.tie_output else 'untied'}), position: {c.position}"
            + ("" if scheme.acts == "tokens" else f" ({scheme.describe()})"),
            f"D = {e['D']}, {c.depth} encoder + {c.decoder_depth} decoder blocks ({norm}-norm), "
            f"H = {e['H']} heads of Dh = {e['Dh']}, F = ffn_dim = {e['F']} ({c.activation})",
        ]
