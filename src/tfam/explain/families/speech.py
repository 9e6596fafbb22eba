"""The speech encoder's own rows: the frames subsampled (a per-frame projection, or stride-2
convolutions) and + position before the encoder; after it the final LN and the head (per
frame, per utterance, or CTC).

Symbols: T input frames (``seq_len``; default 1,000: 10 s of 10 ms frames), M mel bands, s the
subsampling factor, L = ceil(T / s) encoded frames (T2 = ceil(T / 2) after the first of two
convolutions), K labels, plus the bricks' D, H, Dh, F.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from tfam.explain.api import FamilyExplainer, register_family
from tfam.explain.bricks import Explainer, brick_symbols, norm_row, position_network_flops
from tfam.explain.table import FLOPS_PER_ELEMENT, ExplainRow
from tfam.explain.trace import is_identity, linear_flops, numel
from tfam.models.speech import Speech

# The table's default utterance: 10 seconds of 10 ms frames.
DEFAULT_FRAMES = 1000


@register_family("speech")
class SpeechExplainer(FamilyExplainer):
    model_class = Speech
    takes_seq_len = True
    length = "L"

    def tokens(self) -> int:
        """T, the input frames of the table: ``seq_len`` when given, else 1,000 (10 s)."""
        return self.seq_len or DEFAULT_FRAMES

    def length_line(self, symbols: str) -> str:
        return f"{symbols} = {self.tokens()} frames of 10 ms"

    def symbols(self) -> dict[str, int]:
        c = self.model.config
        t = self.tokens()
        out = int(c.output_lengths(torch.tensor(t)))
        return {"T": t, "M": c.n_mels, "s": c.subsampling, "L": out, **brick_symbols(c),
                "K": c.num_labels, "T2": (t + 1) // 2}  # fmt: skip

    def inputs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        c = self.model.config
        frames = torch.empty(self.batch, self.tokens(), c.n_mels, device="meta")
        return (frames,), self.attention_kwargs()

    def embedding_rows(self, ex: Explainer) -> list[ExplainRow]:
        m, t = self.model, ex.trace
        sub = m.subsample
        rows: list[ExplainRow] = []
        if sub.proj is not None:
            call = t.call(sub.proj)
            rows.append(
                ExplainRow("linear projection", call.inputs[0], call.output, "T x M", "L x D",
                           ex.claim("linear projection", sub.proj),
                           linear_flops(sub.proj, call.inputs[0]),
                           note="each 10 ms frame's M log-mel values -> D (no subsampling)"),
            )  # fmt: skip
        else:
            src = "M x T"
            for i, conv in enumerate(sub.convs):
                call = t.call(conv)
                x, y = call.inputs[0], call.output
                c_out, c_in, k = conv.weight.shape
                flops = 2 * c_in * k * numel(y) + numel(y)  # multiply-adds + bias
                flops += FLOPS_PER_ELEMENT.get("gelu", 1) * numel(y)
                last = i == len(sub.convs) - 1
                dst = "D x L" if last else "D x T2"
                rows.append(
                    ExplainRow(f"conv {i + 1} (stride 2) + GELU", x, y, src, dst,
                               ex.claim(f"conv {i + 1}", conv), flops,
                               note=f"Conv1d {c_in} -> {c_out}, width {k}, stride 2, padding 1: "
                               f"halves the frames (ceil); padding frames zeroed first"),
                )  # fmt: skip
                src = dst
        tokens = t.call(m.drop).inputs[0]
        if m.position.acts == "tokens":
            rows.append(
                ExplainRow("+ position", tokens, tokens, "L x D", "L x D",
                           ex.claim("+ position", m.pos_embed, m.position),
                           numel(tokens) + position_network_flops(ex, m.position),
                           note=m.position.describe()),
            )  # fmt: skip
        return rows

    def head_rows(self, ex: Explainer) -> list[ExplainRow]:
        m, c, t = self.model, self.model.config, ex.trace
        rows: list[ExplainRow] = []
        if not is_identity(m.norm):
            row = norm_row(ex, m.norm, "", "final LN", "L")
            rows.append(dataclasses.replace(row, note="the encoder's output norm, per frame"))
        if m.head is None:
            return rows
        call = t.call(m.head)
        x, y = call.inputs[0], call.output
        if c.head == "utterance":
            hidden = t.call(m.norm).output
            stats = c.pool == "stats"
            pooled = "2*D" if stats else "D"
            rows.append(
                ExplainRow("statistics pool" if stats else "masked mean pool", hidden, x,
                           "L x D", pooled, 0, (5 if stats else 2) * numel(hidden),
                           note="[mean ; standard deviation] of the real frames" if stats
                           else "the mean of the real frames"),
            )  # fmt: skip
            rows.append(
                ExplainRow("head", x, y, pooled, "K", ex.claim("head", m.head),
                           linear_flops(m.head, x),
                           note=f"Linear to K = {c.num_labels} utterance classes (speakers)"),
            )  # fmt: skip
            return rows
        what = {
            "frames": f"K = {c.num_labels} labels per frame",
            "ctc": f"K = {c.num_labels} CTC outputs per frame (blank = 0, then the alphabet)",
        }[c.head]
        rows.append(
            ExplainRow("head", x, y, "L x D", "L x K", ex.claim("head", m.head),
                       linear_flops(m.head, x), note=f"Linear to {what}"),
        )  # fmt: skip
        if c.head == "frames" and c.subsampling > 1:
            out = (y[0], y[1] * c.subsampling, y[2])
            rows.append(
                ExplainRow("repeat to the input rate", y, out, "L x K", "s*L x K", 0, 0,
                           note=f"each output frame's logits for its s = {c.subsampling} input "
                           "frames (cropped to T by the caller)"),
            )  # fmt: skip
        return rows

    def header(self, name: str) -> list[str]:
        c, e = self.model.config, self.symbols()
        sub = "no subsampling" if c.subsampling == 1 else f"{c.subsampling}x conv subsampling"
        opts = c.attention_options or {}
        window = f", window {opts['window']}" if "window" in opts else ""
        return [
            f"{name}: speech encoder, batch size {self.batch}, head: {c.head}",
            f"{self.length_line('T')} x M = {e['M']} mel bands, {sub} -> L = {e['L']}, "
            f"position: {c.position}",
            f"D = {e['D']}, {c.depth} blocks, H = {e['H']} heads of Dh = {e['Dh']}, "
            f"F = ffn_dim = {e['F']} ({c.activation}); attention {c.attention}{window}",
        ]
