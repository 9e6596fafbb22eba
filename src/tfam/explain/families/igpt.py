"""iGPT's own rows: GPT's (palette-id embedding -> + position, the causal stack, final norm),
then its head: the untied LM head over the V - 1 palette ids, or the classifier on the mean of
the positions, or nothing (the bare model).

Symbols: L tokens ([start] + pixels in raster order; by default ``max_positions``), V the
vocabulary (palette + start), C classes, plus the bricks' D, H, Dh, F.
"""

from __future__ import annotations

from tfam.explain.api import register_family
from tfam.explain.bricks import Explainer, norm_row
from tfam.explain.families.gpt import GPTExplainer
from tfam.explain.table import ExplainRow
from tfam.explain.trace import is_identity, linear_flops, numel
from tfam.models.igpt import IGPT


@register_family("igpt")
class IGPTExplainer(GPTExplainer):
    model_class = IGPT

    def symbols(self) -> dict[str, int]:
        c = self.model.config
        return {**super().symbols(), **({"C": c.num_labels} if c.head == "sequence" else {})}

    def head_rows(self, ex: Explainer) -> list[ExplainRow]:
        m, c = self.model, self.model.config
        rows = []
        if not is_identity(m.norm):
            call = ex.trace.call(m.norm)
            rows.append(norm_row(ex, m.norm, "", "final norm", "L"))
            hidden = call.output
        if c.head == "lm":
            call = ex.trace.call(m.lm_head)
            rows.append(
                ExplainRow("LM head", call.inputs[0], call.output, "L x D", "L x (V-1)",
                           ex.claim("LM head", m.lm_head),
                           linear_flops(m.lm_head, call.inputs[0]),
                           note=f"untied Linear to the V - 1 = {c.palette_size} palette ids' "
                           "next-pixel logits (the start token is never predicted)"),
            )  # fmt: skip
        elif c.head == "sequence":
            call = ex.trace.call(m.score)
            pooled = call.inputs[0]
            rows.append(
                ExplainRow("mean over positions", hidden, pooled, "L x D", "D", 0,
                           numel(hidden), note=f"of the final-normed output of block {c.depth}"),
            )  # fmt: skip
            rows.append(
                ExplainRow("classifier", pooled, call.output, "D", "C",
                           ex.claim("classifier", m.score), linear_flops(m.score, pooled),
                           note=f"bias-free Linear to C = {c.num_labels} class logits"),
            )  # fmt: skip
        return rows

    def header(self, name: str) -> list[str]:
        c, e = self.model.config, self.symbols()
        lines = super().header(name)
        lines[0] = f"{name}: iGPT (a GPT over palette ids, causal), batch size {self.batch}"
        lines[1] = (
            f"{self.length_line('L')} ([start] + pixels in raster order), V = {e['V']} ids "
            f"({c.palette_size} palette + start = {c.start_token_id}), head: {c.head}, "
            f"position: {c.position}"
            + (
                ""
                if self.model.position.acts == "tokens"
                else f" ({self.model.position.describe()})"
            )
        )
        return lines
