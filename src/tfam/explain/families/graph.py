"""The graph Transformer's own rows: node features -> linear embedding -> [+ virtual node]
-> [+ position] -> (the edge-type bias table, read by every block's scores); after the encoder:
final LN -> readout -> head.

Symbols: N nodes (shown at ``max_nodes``), F_in node features, T edge types (+ 2: self-loops,
virtual edges), K labels, plus the bricks' D, H, Dh, F. The stack's score rows count every
(N, N) pair, what a dense kernel computes; the ``edges`` kernel computes the E edges only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from tfam.explain.api import FamilyExplainer, register_family
from tfam.explain.bricks import Explainer, brick_symbols, norm_row
from tfam.explain.table import ExplainRow
from tfam.explain.trace import is_identity, linear_flops, numel
from tfam.models.graph import GraphTransformer


@register_family("graph")
class GraphExplainer(FamilyExplainer):
    model_class = GraphTransformer
    sample = "graph"

    def __init__(
        self, model: GraphTransformer, batch_size: int, seq_len: int | None = None
    ) -> None:
        super().__init__(model, batch_size, seq_len)
        self.length = "(N+1)" if model.config.prefix else "N"

    def symbols(self) -> dict[str, int]:
        c = self.model.config
        return {"N": c.max_nodes, "F_in": c.in_features, "T": c.edge_types,
                **brick_symbols(c), "K": c.num_labels}  # fmt: skip

    def inputs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        c = self.model.config
        n = c.max_nodes
        nodes = torch.empty(self.batch, n, c.in_features, device="meta")
        edges = torch.empty(self.batch, 2, 2 * n, dtype=torch.int64, device="meta")
        return (nodes, edges), self.attention_kwargs()

    def embedding_rows(self, ex: Explainer) -> list[ExplainRow]:
        m, c, t, L = self.model, self.model.config, ex.trace, self.length
        call = t.call(m.embed)
        nodes, x = call.inputs[0], call.output
        rows = [
            ExplainRow("linear embedding", nodes, x, "N x F_in", "N x D",
                       ex.claim("linear embedding", m.embed), linear_flops(m.embed, nodes),
                       note=f"each node's F_in = {c.in_features} features -> D (a one-hot "
                       "node's row of the weight, plus the bias)"),
        ]  # fmt: skip
        tokens = t.call(m.drop).inputs[0]
        if m.virtual is not None:
            rows.append(
                ExplainRow("+ virtual node", x, tokens, "N x D", f"{L} x D",
                           ex.claim("+ virtual node", m.virtual), 0,
                           note="prepend one learned D-vector joined to every node both ways "
                           "(the graph's [CLS])"),
            )  # fmt: skip
        if m.position.acts == "tokens":
            rows.append(
                ExplainRow("+ position", tokens, tokens, f"{L} x D", f"{L} x D",
                           ex.claim("+ position", m.position), numel(tokens),
                           note=m.position.describe()),
            )  # fmt: skip
        if m.edge_bias is not None:
            rows.append(
                ExplainRow("edge-type bias table", tokens, tokens, f"{L} x D", f"{L} x D",
                           ex.claim("edge-type bias", m.edge_bias), 0,
                           note=f"(T+2) x H = {c.type_rows} x {c.heads} learned scalars, one "
                           "per edge type (T = the data's, self-loop, virtual edge) and head, "
                           "added to that edge's score in every block"),
            )  # fmt: skip
        return rows

    def head_rows(self, ex: Explainer) -> list[ExplainRow]:
        m, c, t, L = self.model, self.model.config, ex.trace, self.length
        rows: list[ExplainRow] = []
        hidden = t.call(m.norm).output  # the hook fires on nn.Identity too
        if not is_identity(m.norm):
            row = norm_row(ex, m.norm, "", "final LN", L)
            rows.append(dataclasses.replace(row, note="the encoder's output norm, per node"))
        if m.head is None:
            return rows
        features = t.call(m.head).inputs[0]
        if c.head in ("graph", "value"):
            what = {"mean": "the mean of the real nodes' states", "sum": "the sum of the real "
                    "nodes' states", "cls": "the virtual node's state"}[c.readout]  # fmt: skip
            flops = 0 if c.readout == "cls" else numel(hidden)
            rows.append(
                ExplainRow(f"readout ({c.readout})", hidden, features, f"{L} x D", "D", 0,
                           flops, note=what),
            )  # fmt: skip
        out = t.call(m.head).output
        per_node = c.head == "node"
        note = {
            "node": f"Linear to K = {c.num_labels} label logits per node",
            "graph": f"Linear to K = {c.num_labels} label logits per graph",
            "value": f"Linear to one number, * {c.target_scale:g} + {c.target_shift:g} (the "
            "training targets' spread and mean: the answer in the data's units)",
        }[c.head]
        rows.append(
            ExplainRow("head", features, out, "N x D" if per_node else "D",
                       "N x K" if per_node else ("K" if c.head == "graph" else "1"),
                       ex.claim("head", m.head), linear_flops(m.head, features), note=note),
        )  # fmt: skip
        return rows

    def header(self, name: str) -> list[str]:
        c, e = self.model.config, self.symbols()
        norm = "pre" if c.norm_first else "post"
        mask = (
            "attention only along edges (+ self-loops)"
            if c.graph_mask
            else "attention over every node (no graph mask)"
        )
        return [
            f"{name}: graph Transformer, batch size {self.batch}, head: {c.head}"
            + (f", readout: {c.readout}" if c.head in ("graph", "value") else ""),
            f"N = max_nodes = {e['N']} nodes of F_in = {e['F_in']} features, T = {e['T']} edge "
            f"types, {mask}, edge-type bias: {'yes' if c.edge_bias else 'no'}, position: "
            f"{c.position}, attention: {c.attention}",
            f"D = {e['D']}, {c.depth} blocks ({norm}-norm), H = {e['H']} heads of "
            f"Dh = {e['Dh']}, F = ffn_dim = {e['F']} ({c.activation})",
        ]
