"""A toy two-stage windowed family, defined here, through the family contract: the stage
bricks (StageStack, PatchMerging, WindowPartition) carry a whole model.

The toy: image -> patches -> stage 1 (D, H heads, windows, the second block shifted) ->
patch merging -> stage 2 (2D, 2H heads, windows, shifted) -> LN -> mean -> head. Its default
grid (9 x 9 patches, window 4) pads in both stages and merges an odd grid (9 x 9 -> 5 x 5).

The family registers for this module's tests only, so other tests see the registries as the
package fills them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
import torch
from torch import Tensor, nn

import tfam
from tfam import config as config_module
from tfam.config import BaseConfig, as_pair, check_positive_int
from tfam.explain import FAMILIES, ExplainTable, FamilyExplainer
from tfam.explain.blocks import stage_stack_rows
from tfam.explain.bricks import Explainer
from tfam.explain.table import ExplainRow
from tfam.explain.trace import linear_flops, norm_flops, numel
from tfam.layers import PatchEmbed, StageSpec, StageStack, make_norm
from tfam.models import MODEL_CLASSES, TfamModel, count_parameters, create_config

FAMILY = "toy_stages"


@dataclass
class ToyStagesConfig(BaseConfig):
    """Two (``stages``) windowed stages; stage s has width dim * 2**s and heads * 2**s."""

    family: ClassVar[str] = FAMILY
    positions: ClassVar[tuple[str, ...]] = ("none",)

    dim: int = 16
    depth: int = 2  # blocks per stage
    heads: int = 2
    position: str = "none"
    norm_eps: float = 1e-5
    image_size: Any = 18
    patch_size: Any = 2
    in_channels: int = 3
    num_classes: int = 5
    window: int = 4
    stages: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        self.image_size = as_pair("image_size", self.image_size)
        self.patch_size = as_pair("patch_size", self.patch_size)
        for name in ("in_channels", "num_classes", "window", "stages"):
            check_positive_int(name, getattr(self, name))

    def stage_specs(self) -> list[StageSpec]:
        return [
            StageSpec(self.dim * 2**s, self.heads * 2**s, self.depth, self.window, shift=True)
            for s in range(self.stages)
        ]


class ToyStages(TfamModel):
    config_class = ToyStagesConfig
    tasks = ("image-classification",)

    def __init__(self, config: ToyStagesConfig) -> None:
        super().__init__(config)
        c = config
        self.patch_embed = PatchEmbed(c)
        self.encoder = StageStack(c, c.stage_specs())
        width = self.encoder.specs[-1].dim
        self.norm = make_norm(c.norm, width, c.norm_eps)
        self.head = nn.Linear(width, c.num_classes)
        self.init_weights()

    def grid(self, x: Tensor) -> tuple[int, int]:
        ph, pw = self.config.patch_size
        return x.shape[-2] // ph, x.shape[-1] // pw

    def forward_features(
        self, x: Tensor, return_attention: bool = False
    ) -> Tensor | tuple[Tensor, list[Tensor]]:
        """(B, C, H, W) -> (B, N_last, D_last) [, per block weights (B*nW, H_s, Ws^2, Ws^2)]."""
        tokens, _, weights = self.encoder(
            self.patch_embed(x), self.grid(x), need_weights=return_attention
        )
        tokens = self.norm(tokens)
        return (tokens, weights) if return_attention else tokens

    def forward_head(self, tokens: Tensor) -> Tensor:
        return self.head(tokens.mean(dim=1))

    def forward(
        self, x: Tensor, return_attention: bool = False
    ) -> Tensor | tuple[Tensor, list[Tensor]]:
        if return_attention:
            tokens, weights = self.forward_features(x, return_attention=True)
            return self.forward_head(tokens), weights
        return self.forward_head(self.forward_features(x))

    def example_inputs(self, batch_size: int = 2) -> tuple[Tensor, ...]:
        c = self.config
        return (torch.randn(batch_size, c.in_channels, *c.image_size),)


class ToyStagesExplainer(FamilyExplainer):
    """The toy's own rows: patch embedding before the stages, LN, mean and head after."""

    def symbols(self) -> dict[str, int]:
        c = self.model.config
        gh, gw = self.model.grid(torch.empty(1, 1, *c.image_size, device="meta"))
        return {"C": c.in_channels, "H_img": c.image_size[0], "W_img": c.image_size[1],
                "N": gh * gw, "D": c.dim, "K": c.num_classes}  # fmt: skip

    def inputs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        c = self.model.config
        image = torch.empty(self.batch, c.in_channels, *c.image_size, device="meta")
        return (image,), {"return_attention": True}

    def rows(self, ex: Explainer) -> list[ExplainRow]:
        m, t = self.model, ex.trace
        image, tokens = t.call(m.patch_embed).inputs[0], t.call(m.patch_embed).output
        grid = m.grid(torch.empty(image, device="meta"))
        rows = [
            ExplainRow("patch embedding", image, tokens, "C x H_img x W_img", "N x D",
                       ex.claim("patch embedding", m.patch_embed),
                       2 * numel(tokens) * m.patch_embed.patch_dim + numel(tokens)),
            *stage_stack_rows(ex, m.encoder, grid),
        ]  # fmt: skip
        last = len(m.encoder.stages)
        n, d = f"N{last}", f"D{last}"
        normed, logits = t.call(m.norm).output, t.call(m.head).output
        pooled = t.call(m.head).inputs[0]
        return rows + [
            ExplainRow("final LN", normed, normed, f"{n} x {d}", f"{n} x {d}",
                       ex.claim("final LN", m.norm), norm_flops(m.norm, normed)),
            ExplainRow("mean of tokens", normed, pooled, f"{n} x {d}", d, 0, numel(normed)),
            ExplainRow("head", pooled, logits, d, "K", ex.claim("head", m.head),
                       linear_flops(m.head, pooled)),
        ]  # fmt: skip


def _unregister() -> None:
    MODEL_CLASSES.pop(FAMILY, None)
    config_module._CONFIG_CLASSES.pop(FAMILY, None)
    FAMILIES.pop(FAMILY, None)


_unregister()  # the class statements above registered the family: only these tests see it


@pytest.fixture(scope="module", autouse=True)
def toy_family():
    MODEL_CLASSES[FAMILY] = ToyStages
    config_module._CONFIG_CLASSES[FAMILY] = ToyStagesConfig
    FAMILIES[FAMILY] = ToyStagesExplainer
    yield
    _unregister()


def toy(**overrides: Any) -> ToyStages:
    torch.manual_seed(0)
    model = tfam.create_model(FAMILY, **overrides)
    assert isinstance(model, ToyStages)
    return model


def test_shapes_through_the_stages():
    model = toy().eval()
    (x,) = model.example_inputs(3)
    tokens = model.patch_embed(x)
    assert tokens.shape == (3, 81, 16)  # 9 x 9 patches
    out, grid, weights = model.encoder(tokens, (9, 9), need_weights=True)
    assert grid == (5, 5) and model.encoder.grids((9, 9)) == [(9, 9), (5, 5)]
    # patch merging pads 9 x 9 to 10 x 10 -> 5 x 5 tokens of width 2D
    assert out.shape == (3, 25, 32)
    # stage 1: 9 x 9 padded to 12 x 12 = 9 windows; stage 2: 5 x 5 padded to 8 x 8 = 4
    assert [tuple(w.shape) for w in weights] == [(27, 2, 16, 16)] * 2 + [(12, 4, 16, 16)] * 2
    parts = [blk.token_partition for blk in model.encoder.blocks]
    assert [(p.window, p.shift) for p in parts] == [(4, 0), (4, 2)] * 2
    assert [blk.mhsa.heads for blk in model.encoder.blocks] == [2, 2, 4, 4]
    assert [blk.mlp.fc1.out_features for blk in model.encoder.blocks] == [64, 64, 128, 128]
    logits, attn = model(x, return_attention=True)
    assert logits.shape == (3, 5) and len(attn) == 4
    torch.testing.assert_close(model.forward_head(model.forward_features(x)), model(x))


def test_trains_one_step_and_saves_with_equal_outputs(tmp_path):
    model = toy(drop_path=0.1)
    (x,) = model.example_inputs(4)
    labels = torch.tensor([0, 1, 2, 3])
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loss = nn.functional.cross_entropy(model(x), labels)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, f"{name} gets no gradient"
        assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt.step()
    assert all(not torch.equal(before[n], p) for n, p in model.named_parameters())
    model.eval()
    with torch.no_grad():
        expected = model(x)
    model.save_pretrained(tmp_path / "toy")
    loaded = tfam.from_pretrained(tmp_path / "toy")
    assert type(loaded) is ToyStages and loaded.config == model.config
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), expected, rtol=0, atol=0)


def test_config_round_trips_through_json():
    config = create_config(FAMILY, window=3, depth=4)
    again = BaseConfig.from_json(config.to_json())
    assert type(again) is ToyStagesConfig and again == config


def test_blocks_are_built_on_their_own():
    model = toy()
    blocks = model.encoder.blocks
    weights = [blk.mhsa.qkv.weight for blk in blocks[:2]]
    assert weights[0].data_ptr() != weights[1].data_ptr()
    assert not torch.equal(*weights)


def test_set_attention_reaches_every_stage():
    model = toy().eval()
    (x,) = model.example_inputs(2)
    with torch.no_grad():
        sdpa = model(x)
        model.set_attention("math")
        assert {blk.mhsa.attention for blk in model.encoder.blocks} == {"math"}
        torch.testing.assert_close(model(x), sdpa)


def assert_pipeline(table: ExplainTable) -> None:
    top = [r for r in table.rows if r.level == 0]
    for prev, cur in zip(top, top[1:]):
        assert cur.input_shape == prev.output_shape, (prev.step, cur.step)


@pytest.mark.parametrize("blocks", ["first", "all"])
def test_explain_describes_stages_and_merging(blocks):
    model = toy()
    table = tfam.explain(model, batch_size=2, blocks=blocks)
    assert table.total_params == model.num_parameters()
    merge = [r for r in table.rows if r.step == "patch merging"]
    assert len(merge) == 1 and merge[0].block == "1->2"
    assert (merge[0].input_symbols, merge[0].output_symbols) == ("N1 x D1", "N2 x D2")
    assert merge[0].input_shape == (2, 81, 16) and merge[0].output_shape == (2, 25, 32)
    assert table.symbols["D2"] == 32 and table.symbols["N2"] == 25 and table.symbols["Ws1"] == 4
    attention = [r for r in table.rows if r.step == "MHSA in windows"]
    assert attention[0].block == "1.1" and attention[0].input_shape == (2 * 9, 16, 16)
    shifted = [r for r in table.rows if r.step == "window partition (shift 2)"]
    if blocks == "all":
        assert_pipeline(table)
        assert [r.block for r in shifted] == ["1.2", "2.2"]
        assert [r.block for r in attention] == ["1.1", "1.2", "2.1", "2.2"]
        stage2 = next(r for r in table.rows if r.step == "MHSA in windows" and r.block == "2.1")
        assert stage2.input_shape == (2 * 4, 16, 32) and stage2.input_symbols == "(Ws2*Ws2) x D2"
    else:
        # block 2 of a stage is shifted, so it differs from block 1: a summary row says so
        summaries = [r for r in table.rows if r.step == "blocks differ from block 1"]
        assert [r.block for r in summaries] == ["1.2..2", "2.2..2"]
    text = str(table)
    assert "window partition" in text and "patch merging" in text


def test_builds_on_meta_and_explain_by_name_totals_match():
    with torch.device("meta"):
        model = tfam.create_model(FAMILY, window=3)
    assert all(p.device.type == "meta" for p in model.parameters())
    total = count_parameters(FAMILY, window=3)
    assert total == model.num_parameters() == toy().num_parameters() > 0
    assert tfam.explain(FAMILY, window=3).total_params == total


def test_explain_leaves_the_model_alone():
    model = toy()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    tfam.explain(model)
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    by_name = tfam.explain(FAMILY, window=5)
    assert by_name.total_params == model.num_parameters()


class TableBias(nn.Module):
    """A per-layer bias over a window's Ws*Ws tokens, as Swin's relative position table will
    be: (q_pos (L,), k_pos (L,)) -> (H, L, L)."""

    def __init__(self, heads: int, window: int, value: float = 0.0) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.full((heads, window**2, window**2), value))

    def forward(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        assert q_pos.tolist() == k_pos.tolist() == list(range(self.table.shape[-1]))
        return self.table


def test_windowed_blocks_take_a_per_layer_bias():
    """A family (Swin) gives each windowed block's attention its own bias table: it sees the
    window's positions, adds to the shifted-window mask, and learns."""
    model = toy(attention="math").eval()
    (x,) = model.example_inputs(2)
    with torch.no_grad():
        plain = model(x)
    for blk in model.encoder.blocks:
        blk.mhsa.bias_provider = TableBias(blk.mhsa.heads, blk.token_partition.window, 3.0)
    with torch.no_grad():
        torch.testing.assert_close(model(x), plain)  # a constant bias leaves softmax alone
    model(x).square().mean().backward()
    for blk in model.encoder.blocks:
        assert blk.mhsa.bias_provider.table.grad.abs().sum() > 0
