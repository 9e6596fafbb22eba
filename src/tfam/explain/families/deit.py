"""DeiT's rows: ViT's (:mod:`tfam.explain.families.vit`), with the distillation token after
[CLS] and, after the class head, the distillation head on [DIST] and the average of the two
heads' logits (the prediction). Symbols as ViT's.
"""

from __future__ import annotations

import dataclasses

from tfam.explain.api import register_family
from tfam.explain.bricks import Explainer
from tfam.explain.families.vit import ViTExplainer
from tfam.explain.table import ExplainRow
from tfam.explain.trace import linear_flops, numel
from tfam.models.deit import DeiT


@register_family("deit")
class DeiTExplainer(ViTExplainer):
    model_class = DeiT

    def embedding_rows(self, ex: Explainer) -> list[ExplainRow]:
        rows = super().embedding_rows(ex)
        m = self.model
        if m.dist_token is None:
            return rows
        # ViT's rows prepend [CLS]; [DIST] goes right after it (Hugging Face's order).
        tokens = ex.trace.call(m.pos_drop).inputs[0]  # (B, prefix + N, D)
        before = (tokens[0], tokens[1] - 1, tokens[2])
        shorter = {1: "N", 2: "(N+1)"}[m.num_prefix_tokens]  # the tokens before [DIST]
        at = next((i for i, r in enumerate(rows) if r.step == "+ [CLS]"), None)
        if at is None:  # no [CLS]: [DIST] follows the projection
            at = next(i for i, r in enumerate(rows) if r.step == "linear projection")
        else:
            rows[at] = dataclasses.replace(
                rows[at], output_shape=before, output_symbols=f"{shorter} x D"
            )
        dist = ExplainRow(
            "+ [DIST]", before, tokens, f"{shorter} x D", f"{self.length} x D",
            ex.claim("+ [DIST]", m.dist_token), 0,
            note="insert the learned distillation token after [CLS]: one D-vector shared by "
            "every image; its output is matched to the teacher's (Touvron et al. 2021)",
        )  # fmt: skip
        rows.insert(at + 1, dist)
        return rows

    def head_rows(self, ex: Explainer) -> list[ExplainRow]:
        rows = super().head_rows(ex)
        m, t = self.model, ex.trace
        if m.dist_token is None or not m.config.num_classes:
            return rows
        rows = [
            dataclasses.replace(r, step="head (class)") if r.step == "head" else r for r in rows
        ]
        tokens = t.call(m.norm).output
        dist = t.call(m.head_dist).inputs[0]
        logits = t.call(m.head_dist).output
        k = m.config.num_classes
        rows += [
            ExplainRow("[DIST] token", tokens, dist, f"{self.length} x D", "D", 0, 0,
                       note=f"keep token {m.dist_index}, the distillation token"),
            ExplainRow("head_dist (distillation)", dist, logits, "D", "K",
                       ex.claim("head_dist", m.head_dist), linear_flops(m.head_dist, dist),
                       note=f"Linear to K = {k} logits, trained against the teacher"),
            ExplainRow("average of the two heads", logits, logits, "K", "K", 0,
                       2 * numel(logits),
                       note="(class logits + distillation logits) / 2, the prediction; "
                       "training reads the two apart"),
        ]  # fmt: skip
        return rows

    def header(self, name: str) -> list[str]:
        lines = super().header(name)
        lines[0] = lines[0].replace(": ViT,", ": DeiT,", 1)
        m, n = self.model, self.symbols()["N"]
        if m.dist_token is not None:
            plain = f"[CLS] + N = {n + 1} tokens"  # ViT's words for any prefix
            ours = "[CLS] + [DIST]" if m.cls_token is not None else "[DIST]"
            lines[2] = lines[2].replace(plain, f"{ours} + N = {n + m.num_prefix_tokens} tokens")
            pooled = "[CLS]" if m.config.pool == "cls" else "mean of patches"
            lines[2] += f", two heads ({pooled} and [DIST], averaged)"
        return lines
