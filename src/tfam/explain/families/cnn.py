"""The CNN's rows (a ResNet): stem -> stages of residual blocks (tfam.explain.conv) -> global
average pool -> head.

Symbols: C channels, H_img x W_img image, D0 the stem's width, D<s>/h<s>/w<s> stage s's width
and map, M<s> a bottleneck's inner width, D the last width, K = num_classes.
"""

from __future__ import annotations

from typing import Any

import torch

from tfam.explain.api import FamilyExplainer, register_family
from tfam.explain.bricks import Explainer
from tfam.explain.conv import conv_symbols, encoder_rows, stem_rows
from tfam.explain.table import ExplainRow
from tfam.explain.trace import is_identity, linear_flops, numel
from tfam.models.cnn import CNN


@register_family("cnn")
class CNNExplainer(FamilyExplainer):
    model_class = CNN

    def symbols(self) -> dict[str, int]:
        m, c = self.model, self.model.config
        return {
            "C": c.in_channels,
            "H_img": c.image_size[0],
            "W_img": c.image_size[1],
            **conv_symbols(m.embedder, m.encoder, c.image_size),
            "D": c.dim,
            "K": c.num_classes,
        }

    def inputs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        c = self.model.config
        return (torch.empty(self.batch, c.in_channels, *c.image_size, device="meta"),), {}

    def rows(self, ex: Explainer) -> list[ExplainRow]:
        m, c, t = self.model, self.model.config, ex.trace
        n = len(c.hidden_sizes)
        pool = t.call(m.pooler)
        rows = [
            *stem_rows(ex, m.embedder),
            *encoder_rows(ex, m.encoder),
            ExplainRow("global average pool", pool.inputs[0], pool.output[:2],
                       f"D x h{n} x w{n}", "D", 0, numel(pool.inputs[0]),
                       note="the mean of each channel over the map (h*w - 1 adds, 1 divide)"),
        ]  # fmt: skip
        if not is_identity(m.head):
            features = t.call(m.head).inputs[0]
            rows.append(
                ExplainRow("head", features, t.call(m.head).output, "D", "K",
                           ex.claim("head", m.head), linear_flops(m.head, features),
                           note=f"Linear to K = {c.num_classes} class logits"),
            )  # fmt: skip
        return rows

    def header(self, name: str) -> list[str]:
        c, e = self.model.config, self.symbols()
        stem = (
            "7x7/2 conv + BN + ReLU + 3x3/2 max-pool"
            if c.stem == "resnet"
            else "3x3 conv + BN + ReLU, no pool"
        )
        stages = ", ".join(
            f"{d} x {w} ({e[f'h{s}']}x{e[f'w{s}']})"
            for s, (d, w) in enumerate(zip(c.depths, c.hidden_sizes, strict=True), start=1)
        )
        return [
            f"{name}: ResNet, batch size {self.batch}"
            + (" (shapes below are per image)" if self.batch == 1 else ""),
            f"image C x H_img x W_img = {e['C']} x {e['H_img']} x {e['W_img']}, stem {stem} "
            f"to D0 = {e['D0']} on {e['h0']} x {e['w0']}",
            f"stages (blocks x width (map)): {stages}; {c.layer_type} blocks, "
            f"{c.activation}, global average pool"
            + (f", K = {e['K']} classes" if c.num_classes else ", no head (K = 0)"),
        ]
