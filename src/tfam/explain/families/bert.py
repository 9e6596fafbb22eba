"""BERT's own rows: token, segment and position embeddings summed and normalised before the
encoder; after it the pooler and the head (masked LM, per-token or per-sequence labels).

Symbols: L tokens (``seq_len``, by default ``max_positions``: the longest input the model
takes), V vocabulary, S segment types, K labels, plus the bricks' D, H, Dh, F.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from tfam.explain.api import FamilyExplainer, register_family
from tfam.explain.bricks import Explainer, brick_symbols, norm_row
from tfam.explain.table import FLOPS_PER_ELEMENT, ExplainRow
from tfam.explain.trace import is_identity, linear_flops, matmul_flops, numel
from tfam.models.bert import Bert


@register_family("bert")
class BertExplainer(FamilyExplainer):
    model_class = Bert
    takes_seq_len = True

    def symbols(self) -> dict[str, int]:
        c = self.model.config
        return {"L": self.tokens(), "V": c.vocab_size, "S": c.type_vocab_size,
                **brick_symbols(c), "K": c.num_labels}  # fmt: skip

    def inputs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        c = self.model.config
        # Real ids (the model checks their range), no padding; the lookups run on meta weights.
        ids = torch.full((self.batch, self.tokens()), (c.pad_token_id + 1) % c.vocab_size)
        return (ids,), self.attention_kwargs()

    def embedding_rows(self, ex: Explainer) -> list[ExplainRow]:
        m, c = self.model, self.model.config
        emb = m.embed
        call = ex.trace.call(emb)
        ids, out = call.inputs[0], call.output
        rows = [
            ExplainRow("token embedding", ids, out, "L", "L x D", ex.claim("token", emb.tokens), 0,
                       note=f"each id's row of the V x D = {c.vocab_size} x {c.dim} table"),
            ExplainRow("+ segment", out, out, "L x D", "L x D", ex.claim("segment", emb.segments),
                       numel(out), note=f"add the row of each token's segment (S = "
                       f"{c.type_vocab_size} learned rows; sentence A = 0)"),
        ]  # fmt: skip
        if emb.position.acts == "tokens":
            learned = emb.positions is not None
            rows.append(
                ExplainRow("+ position", out, out, "L x D", "L x D",
                           ex.claim("position", emb.positions), numel(out),
                           note=f"add the learned table's rows 0..L-1 (L = {self.tokens()})"
                           if learned else emb.position.describe()),
            )  # fmt: skip
        row = norm_row(ex, emb.norm, "", "embedding LN", "L")
        return [*rows, dataclasses.replace(row, note="normalise the summed embedding per token")]

    def head_rows(self, ex: Explainer) -> list[ExplainRow]:
        m, c, t = self.model, self.model.config, ex.trace
        rows: list[ExplainRow] = []
        if not is_identity(m.norm):
            rows.append(norm_row(ex, m.norm, "", "final LN", "L"))
        hidden = t.call(m.norm).output  # the hook fires on nn.Identity too
        pooled = (hidden[0], hidden[-1])
        if m.pooler is not None:
            dense = m.pooler[0]
            used = "" if c.head == "sequence" else "; model.pool(hidden), not part of forward"
            rows.append(
                ExplainRow("pooler (Linear + tanh on [CLS])", hidden, pooled, "L x D", "D",
                           ex.claim("pooler", m.pooler),
                           linear_flops(dense, pooled) + FLOPS_PER_ELEMENT["tanh"] * numel(pooled),
                           note=f"tanh(h_[CLS] W + b), D -> D{used}"),
            )  # fmt: skip
        if m.mlm is not None:
            head = m.mlm
            out = t.call(head).output
            act = FLOPS_PER_ELEMENT.get(c.activation, 1) * numel(hidden)
            dec = matmul_flops(numel(hidden[:-1]), c.dim, c.vocab_size, True)
            rows.append(
                ExplainRow("MLM transform (Linear + act + LN)", hidden, hidden, "L x D", "L x D",
                           ex.claim("MLM transform", head.dense, head.norm),
                           linear_flops(head.dense, hidden) + act
                           + FLOPS_PER_ELEMENT["layernorm"] * numel(hidden),
                           note=f"dense D -> D, {c.activation}, LayerNorm"),
            )  # fmt: skip
            rows.append(
                ExplainRow("MLM decoder", hidden, out, "L x D", "L x V",
                           ex.claim("MLM decoder bias", head.decoder.bias), dec,
                           note=f"logits over V = {c.vocab_size} ids; the weight is the token "
                           "embedding's (tied), the bias is its own"),
            )  # fmt: skip
        if m.classifier is not None:
            per_token = c.head == "token"
            features = hidden if per_token else pooled
            rows.append(
                ExplainRow("classifier", features, t.call(m.classifier).output,
                           "L x D" if per_token else "D", "L x K" if per_token else "K",
                           ex.claim("classifier", m.classifier),
                           linear_flops(m.classifier, features),
                           note=f"Linear to K = {c.num_labels} label logits "
                           + ("per token" if per_token else "from the pooled [CLS]")),
            )  # fmt: skip
        return rows

    def header(self, name: str) -> list[str]:
        m, c, e = self.model, self.model.config, self.symbols()
        norm = "pre" if c.norm_first else "post"
        return [
            f"{name}: BERT, batch size {self.batch}, head: {c.head}"
            + (" + pooler" if c.pooler and c.head != "sequence" else ""),
            f"{self.length_line('L')}, V = {e['V']} ids, S = {e['S']} segments"
            + (f", K = {e['K']} labels" if c.head in ("token", "sequence") else "")
            + ("" if c.position == "learned" else f", position: {c.position}")
            + ("" if m.embed.position.acts == "tokens" else f" ({m.embed.position.describe()})"),
            f"D = {e['D']}, {c.depth} blocks ({norm}-norm), H = {e['H']} heads of "
            f"Dh = {e['Dh']}, F = ffn_dim = {e['F']} ({c.activation})",
        ]
