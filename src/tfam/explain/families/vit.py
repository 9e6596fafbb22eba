"""ViT's own rows, in the order of the source documents: patching -> linear projection ->
+ [CLS] -> + position (the scheme describes itself), and after the encoder: final LN -> pooling -> pre-logits -> head.

Symbols: C channels, H_img x W_img image, P_h x P_w patch, N patches, D width, H heads,
Dh = D / H, F = ffn_dim, R = representation_size, K = num_classes (image height and width are
H_img/W_img because H names the heads).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from tfam.explain.api import FamilyExplainer, register_family
from tfam.explain.bricks import Explainer, brick_symbols, norm_row, position_network_flops
from tfam.explain.conv import conv_symbols, encoder_rows, stem_rows
from tfam.explain.table import FLOPS_PER_ELEMENT, ExplainRow
from tfam.explain.trace import is_identity, linear_flops, numel
from tfam.models.base import TfamModel
from tfam.models.vit import ViT


@register_family("vit")
class ViTExplainer(FamilyExplainer):
    model_class = ViT

    def __init__(self, model: TfamModel, batch_size: int) -> None:
        super().__init__(model, batch_size)
        self.prefix = model.num_prefix_tokens
        self.length = {0: "N", 1: "(N+1)"}.get(self.prefix, f"(N+{self.prefix})")

    def symbols(self) -> dict[str, int]:
        c = self.model.config
        return {
            "C": c.in_channels,
            "H_img": c.image_size[0],
            "W_img": c.image_size[1],
            "P_h": c.patch_size[0],
            "P_w": c.patch_size[1],
            "N": c.num_patches,
            **brick_symbols(c),
            "K": c.num_classes,
            "R": c.representation_size or 0,
            **(
                {}
                if self.model.backbone is None
                else conv_symbols(
                    self.model.backbone.embedder, self.model.backbone.encoder, c.image_size
                )
            ),
        }

    def inputs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        c = self.model.config
        image = torch.empty(self.batch, c.in_channels, *c.image_size, device="meta")
        # return_attention=True runs the whole computation the table describes: every block
        # over every token (a plain forward skips the last block's non-[CLS] rows).
        return (image,), self.attention_kwargs()

    def embedding_rows(self, ex: Explainer) -> list[ExplainRow]:
        m, t, L = self.model, ex.trace, self.length
        pe = m.patch_embed
        image = t.call(pe).inputs[0]
        grid = t.call(pe.proj).output  # (B, D, gh, gw): the strided convolution's output
        d_out, c_in, kh, kw = pe.proj.weight.shape
        gh, gw, patch_dim = grid[2], grid[3], c_in * kh * kw
        patches = (image[0], gh * gw, patch_dim)
        projected = t.call(pe).output
        tokens = t.call(m.pos_drop).inputs[0]  # after [CLS] and position
        rows: list[ExplainRow] = []
        src, channels, sides = "C x H_img x W_img", "C", "(H_img/P_h)*(W_img/P_w)"
        if m.backbone is not None:
            # The hybrid: the conv backbone's map (D<n> x h<n> x w<n>) is what is cut.
            n = len(m.backbone.encoder.stages)
            rows += [*stem_rows(ex, m.backbone.embedder), *encoder_rows(ex, m.backbone.encoder)]
            src, channels, sides = f"D{n} x h{n} x w{n}", f"D{n}", f"(h{n}/P_h)*(w{n}/P_w)"
        cut = "of the feature map " if m.backbone is not None else ""
        rows += [
            ExplainRow("patching", image, patches, src, f"N x (P_h*P_w*{channels})", 0, 0,
                       note=f"N = {sides} = {gh}*{gw} = {gh * gw} patches {cut}each "
                       f"flattened to P_h*P_w*{channels} = {kh}*{kw}*{c_in} = {patch_dim} "
                       "values (row-major over the grid; runs fused with the projection as a "
                       "strided convolution)"),
            ExplainRow("linear projection", patches, projected, f"N x (P_h*P_w*{channels})",
                       "N x D", ex.claim("linear projection", pe),
                       2 * numel(patches) * d_out + numel(projected)),
        ]  # fmt: skip
        if m.cls_token is not None:
            rows.append(
                ExplainRow("+ [CLS]", projected, tokens, "N x D", f"{L} x D",
                           ex.claim("+ [CLS]", m.cls_token), 0,
                           note="prepend the learned [CLS] token: one D-vector shared by every "
                           "image"),
            )  # fmt: skip
        if m.position.acts == "tokens":
            rows.append(
                ExplainRow("+ position", tokens, tokens, f"{L} x D", f"{L} x D",
                           ex.claim("+ position", m.pos_embed, m.position),
                           numel(tokens) + position_network_flops(ex, m.position),
                           note=m.position.describe()),
            )  # fmt: skip
        return rows

    def head_rows(self, ex: Explainer) -> list[ExplainRow]:
        m, c, t, L = self.model, self.model.config, ex.trace, self.length
        rows = []
        tokens = t.call(m.norm).output  # the hook fires on nn.Identity too
        if not is_identity(m.norm):
            row = norm_row(ex, m.norm, "", "final LN", L)
            rows.append(dataclasses.replace(row, note="the encoder's output norm, per token"))
        pooled = t.call(m.pre_logits).inputs[0]
        if c.pool == "cls":
            pool_step, pool_flops, pool_note = "pooling ([CLS] token)", 0, "keep token 0"
        else:
            pool_step = "pooling (mean of patches)"
            pool_flops = numel(pooled) * (tokens[1] - self.prefix)  # n - 1 adds and a divide
            pool_note = "average the N patch tokens"
        rows.append(
            ExplainRow(pool_step, tokens, pooled, f"{L} x D", "D", 0, pool_flops, note=pool_note)
        )
        features = t.call(m.pre_logits).output
        if not is_identity(m.pre_logits):
            flops = linear_flops(m.pre_logits[0], pooled)
            rows.append(
                ExplainRow("pre-logits (Linear + tanh)", pooled, features, "D", "R",
                           ex.claim("pre-logits", m.pre_logits),
                           flops + FLOPS_PER_ELEMENT["tanh"] * numel(features),
                           note="the ViT paper's representation layer: tanh(x W + b), D -> R"),
            )  # fmt: skip
        if not is_identity(m.head):
            rows.append(
                ExplainRow("head", features, t.call(m.head).output,
                           "R" if c.representation_size else "D", "K",
                           ex.claim("head", m.head), linear_flops(m.head, features),
                           note=f"Linear to K = {c.num_classes} class logits"),
            )  # fmt: skip
        return rows

    def header(self, name: str) -> list[str]:
        c, e = self.model.config, self.symbols()
        gh, gw = c.grid_size
        norm = "pre" if c.norm_first else "post"
        tokens = f"[CLS] + N = {e['N'] + 1} tokens" if self.prefix else f"N = {e['N']} tokens"
        return [
            f"{name}: ViT, batch size {self.batch}"
            + (" (shapes below are per image)" if self.batch == 1 else ""),
            f"image C x H_img x W_img = {e['C']} x {e['H_img']} x {e['W_img']}, "
            + (
                ""
                if c.stem is None
                else f"hybrid: a conv stem ({c.stem['stem']}, {c.stem['layer_type']} stages "
                f"{c.stem['hidden_sizes']}) gives a {c.patch_channels} x {c.map_size[0]} x "
                f"{c.map_size[1]} map, "
            )
            + f"patch P_h x P_w = {e['P_h']} x {e['P_w']} -> N = {gh} x {gw} = {e['N']} patches "
            f"of dimension {c.patch_dim}",
            f"D = {e['D']}, {c.depth} block{'' if c.depth == 1 else 's'} ({norm}-norm), "
            f"H = {e['H']} heads of Dh = {e['Dh']}, F = ffn_dim = {e['F']} ({c.activation}), "
            + tokens
            + f", position: {c.position}, pool: {c.pool}"
            + (f", R = {e['R']}" if c.representation_size else "")
            + (f", K = {e['K']} classes" if c.num_classes else ", no head (K = 0)"),
            *(
                []
                if self.model.position.acts != "qk"
                else [f"position: {self.model.position.describe()}"]
            ),
        ]
