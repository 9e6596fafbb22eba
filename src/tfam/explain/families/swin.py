"""Swin's own rows, in the paper's order (Liu et al. 2021, figure 3): patch partition ->
linear embedding -> LN [-> + position], then the stages (each block's window partition, its
attention within windows with the relative position bias, the merge back; patch merging
between stages: explain/blocks.py's ``stage_stack_rows``), then final LN -> average pool ->
head.

Symbols: C channels, H_img x W_img image, P_h x P_w patch, N patches of the first stage, and
per stage s: N<s> tokens on its grid, D<s> width, H<s> heads, Dh<s>, F<s>, Ws<s> window side;
K = num_classes.
"""

from __future__ import annotations

from typing import Any

import torch

from tfam.explain.api import FamilyExplainer, register_family
from tfam.explain.blocks import stage_stack_rows
from tfam.explain.bricks import Explainer, norm_row, position_network_flops
from tfam.explain.table import ExplainRow
from tfam.explain.trace import is_identity, linear_flops, norm_flops, numel
from tfam.models.swin import Swin


@register_family("swin")
class SwinExplainer(FamilyExplainer):
    model_class = Swin

    def symbols(self) -> dict[str, int]:
        c = self.model.config
        gh, gw = c.grid_size
        return {
            "C": c.in_channels,
            "H_img": c.image_size[0],
            "W_img": c.image_size[1],
            "P_h": c.patch_size[0],
            "P_w": c.patch_size[1],
            "N": gh * gw,
            "D": c.dim,
            "K": c.num_classes,
        }

    def inputs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        c = self.model.config
        image = torch.empty(self.batch, c.in_channels, *c.image_size, device="meta")
        return (image,), self.attention_kwargs()

    def rows(self, ex: Explainer) -> list[ExplainRow]:
        return [*self.embedding_rows(ex), *self.stage_rows(ex), *self.head_rows(ex)]

    def embedding_rows(self, ex: Explainer) -> list[ExplainRow]:
        m, t = self.model, ex.trace
        pe = m.patch_embed
        image = t.call(pe).inputs[0]
        grid = t.call(pe.proj).output  # (B, D, gh, gw)
        d_out, c_in, kh, kw = pe.proj.weight.shape
        gh, gw, patch_dim = grid[2], grid[3], c_in * kh * kw
        patches = (image[0], gh * gw, patch_dim)
        projected = t.call(pe).output
        rows = [
            ExplainRow("patch partition", image, patches, "C x H_img x W_img", "N x (P_h*P_w*C)",
                       0, 0, note=f"N = (H_img/P_h)*(W_img/P_w) = {gh}*{gw} = {gh * gw} patches "
                       f"of P_h*P_w*C = {kh}*{kw}*{c_in} = {patch_dim} values (row-major; runs "
                       "fused with the embedding as a strided convolution)"),
            ExplainRow("linear embedding", patches, projected, "N x (P_h*P_w*C)", "N x D",
                       ex.claim("linear embedding", pe),
                       2 * numel(patches) * d_out + numel(projected)),
            norm_row(ex, m.embed_norm, "", "LN (embedding)", "N"),
        ]  # fmt: skip
        if m.position.acts == "tokens":
            tokens = t.call(m.pos_drop).inputs[0]
            rows.append(
                ExplainRow("+ position", tokens, tokens, "N x D", "N x D",
                           ex.claim("+ position", m.pos_embed, m.position),
                           numel(tokens) + position_network_flops(ex, m.position),
                           note=m.position.describe()),
            )  # fmt: skip
        return rows

    def stage_rows(self, ex: Explainer) -> list[ExplainRow]:
        m = self.model
        return stage_stack_rows(ex, m.encoder, m.config.grid_size)

    def head_rows(self, ex: Explainer) -> list[ExplainRow]:
        m, c, t = self.model, self.model.config, ex.trace
        last = len(m.encoder.stages)
        n, d = f"N{last}", f"D{last}"
        normed = t.call(m.norm).output
        pooled = t.call(m.head).inputs[0]
        rows = [
            ExplainRow("final LN", normed, normed, f"{n} x {d}", f"{n} x {d}",
                       ex.claim("final LN", m.norm), norm_flops(m.norm, normed),
                       note="LayerNorm of the last stage's tokens"),
            ExplainRow("average pool", normed, pooled, f"{n} x {d}", d, 0, numel(normed),
                       note=f"the mean of the {normed[1]} tokens of the last stage"),
        ]  # fmt: skip
        if not is_identity(m.head):
            rows.append(
                ExplainRow("head", pooled, t.call(m.head).output, d, "K",
                           ex.claim("head", m.head), linear_flops(m.head, pooled),
                           note=f"Linear to K = {c.num_classes} class logits"),
            )  # fmt: skip
        return rows

    def header(self, name: str) -> list[str]:
        c, m = self.model.config, self.model
        grids = c.stage_grids()
        stages = "; ".join(
            f"stage {s}: {g[0]}x{g[1]} grid, D={spec.dim}, H={spec.heads}, {spec.depth} "
            f"block{'' if spec.depth == 1 else 's'}, windows {spec.window}x{spec.window}"
            + ("" if min(g) > spec.window else " (no shift: one window spans the grid)")
            for s, (g, spec) in enumerate(zip(grids, m.encoder.specs, strict=True), start=1)
        )
        return [
            f"{name}: Swin, batch size {self.batch}"
            + (" (shapes below are per image)" if self.batch == 1 else ""),
            f"image C x H_img x W_img = {c.in_channels} x {c.image_size[0]} x "
            f"{c.image_size[1]}, patch {c.patch_size[0]} x {c.patch_size[1]} -> "
            f"{grids[0][0]} x {grids[0][1]} patches; position: {c.position}; "
            + (f"K = {c.num_classes} classes" if c.num_classes else "no head (K = 0)"),
            stages,
        ]
