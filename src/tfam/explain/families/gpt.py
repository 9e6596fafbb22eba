"""GPT's own rows: token embedding -> + position (when the scheme adds to the tokens; the
scheme describes itself), the causal stack, and after it: final LN -> LM head (tied to the
token embedding).

Symbols: L tokens (``seq_len``, by default ``max_positions``: the longest context the model
takes), V vocabulary, plus the bricks' D, H, Dh, F.
"""

from __future__ import annotations

from typing import Any

import torch

from tfam.explain.api import FamilyExplainer, register_family
from tfam.explain.bricks import Explainer, brick_symbols, norm_row, position_network_flops
from tfam.explain.table import ExplainRow
from tfam.explain.trace import is_identity, linear_flops, numel
from tfam.models.gpt import GPT


@register_family("gpt")
class GPTExplainer(FamilyExplainer):
    model_class = GPT
    takes_seq_len = True

    def symbols(self) -> dict[str, int]:
        c = self.model.config
        return {"L": self.tokens(), "V": c.vocab_size, **brick_symbols(c)}

    def inputs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        # Real ids (the model checks their range) over L tokens, no padding; the lookups run
        # on meta weights like everything else.
        ids = torch.zeros(self.batch, self.tokens(), dtype=torch.long)
        return (ids,), self.attention_kwargs()

    def embedding_rows(self, ex: Explainer) -> list[ExplainRow]:
        m, c = self.model, self.model.config
        call = ex.trace.call(m.tok_embed)
        ids, out = call.inputs[0], call.output
        rows = [
            ExplainRow("token embedding", ids, out, "L", "L x D",
                       ex.claim("token embedding", m.tok_embed), 0,
                       note=f"each id's row of the V x D = {c.vocab_size} x {c.dim} table"),
        ]  # fmt: skip
        if m.position.acts == "tokens":
            rows.append(
                ExplainRow("+ position", out, out, "L x D", "L x D",
                           ex.claim("+ position", m.pos_embed, m.position),
                           numel(out) + position_network_flops(ex, m.position),
                           note=m.position.describe()),
            )  # fmt: skip
        return rows

    def head_rows(self, ex: Explainer) -> list[ExplainRow]:
        m, c = self.model, self.model.config
        rows = []
        if not is_identity(m.norm):
            rows.append(norm_row(ex, m.norm, "", "final LN", "L"))
        call = ex.trace.call(m.lm_head)
        tied = m.lm_head.weight is m.tok_embed.weight
        rows.append(
            ExplainRow("LM head", call.inputs[0], call.output, "L x D", "L x V",
                       0 if tied else ex.claim("LM head", m.lm_head),
                       linear_flops(m.lm_head, call.inputs[0]),
                       note=f"Linear to V = {c.vocab_size} next-token logits"
                       + ("; its weight is the token embedding's (tied)" if tied else "")),
        )  # fmt: skip
        return rows

    def header(self, name: str) -> list[str]:
        m, c, e = self.model, self.model.config, self.symbols()
        norm = "pre" if c.norm_first else "post"
        return [
            f"{name}: GPT (decoder-only, causal), batch size {self.batch}",
            f"{self.length_line('L')}, V = {e['V']} ids (output "
            f"{'tied' if c.tie_output else 'untied'}), position: {c.position}"
            + ("" if m.position.acts == "tokens" else f" ({m.position.describe()})"),
            f"D = {e['D']}, {c.depth} block{'' if c.depth == 1 else 's'} ({norm}-norm, causal), "
            f"H = {e['H']} heads of Dh = {e['Dh']}, F = ffn_dim = {e['F']} ({c.activation})",
        ]
