"""The hybrid ViT (ViT paper, section 3.1): a conv backbone's feature map, not the image, is
cut into patches."""

from __future__ import annotations

import pytest
import torch

import tfam
from tfam.layers.conv import ConvSpec

STEM = {"stem": "small", "embedding_size": 4, "hidden_sizes": [4, 8], "depths": [1, 1]}


def hybrid(**overrides) -> tfam.models.ViT:
    values = dict(
        image_size=8, patch_size=1, in_channels=1, num_classes=3, dim=8, depth=1, heads=2,
        stem=STEM, position="none", class_token=False, pool="mean",
    )  # fmt: skip
    return tfam.create_model("vit", **{**values, **overrides})


def test_the_patches_are_a_1x1_projection_of_the_stem_map():
    torch.manual_seed(0)
    model = hybrid().eval()
    x = torch.randn(2, 1, 8, 8)
    with torch.no_grad():
        fmap = model.backbone(x)  # (B, C_out, h, w): small stem keeps 8x8, stage 2 halves
        assert fmap.shape == (2, 8, 4, 4)
        w = model.patch_embed.proj.weight[:, :, 0, 0]  # (D, C_out)
        expected = torch.einsum("dc,bchw->bhwd", w, fmap).reshape(2, 16, 8)
        expected = expected + model.patch_embed.proj.bias
        # Without [CLS] and positions the embedded tokens are the patches themselves.
        torch.testing.assert_close(model.embed(x), expected, rtol=1e-5, atol=1e-6)
    assert model.config.grid_size == (4, 4) and model.config.patch_dim == 8


def test_with_cls_and_positions_the_patch_tokens_follow_the_stem():
    torch.manual_seed(0)
    model = hybrid(position="learned", class_token=True, pool="cls").eval()
    x = torch.randn(2, 1, 8, 8)
    with torch.no_grad():
        patches = model.patch_embed(model.backbone(x))
        tokens = model.embed(x)
    assert tokens.shape == (2, 17, 8)
    torch.testing.assert_close(tokens[:, 1:], patches + model.pos_embed[:, 1:])


def test_patch_size_applies_to_the_feature_map():
    model = hybrid(patch_size=2)
    assert model.config.grid_size == (2, 2) and model.config.patch_dim == 2 * 2 * 8
    assert model(torch.randn(2, 1, 8, 8)).shape == (2, 3)
    with pytest.raises(ValueError, match="the feature map height 4 is not divisible"):
        hybrid(patch_size=3)


def test_stem_fields_are_checked_and_round_trip():
    with pytest.raises(ValueError, match=r"stem.layer_typ='x' is invalid"):
        hybrid(stem={"layer_typ": "x"})
    with pytest.raises(ValueError, match=r"stem.stem='big' is invalid"):
        hybrid(stem={"stem": "big"})
    config = hybrid().config
    again = tfam.config.BaseConfig.from_json(config.to_json())
    assert again == config and again.stem == ConvSpec.from_dict(STEM).to_dict()
    # The default spec is the paper's: ResNet-50 stages 1-3, a 14 x 14 map at 224 x 224.
    assert ConvSpec().output_size((224, 224)) == (14, 14) and ConvSpec().out_channels == 1024


def test_the_hybrid_is_not_converted_to_hf_vit():
    pytest.importorskip("transformers")
    with pytest.raises(ValueError, match=r"^stem=.* cannot be converted to Hugging Face ViT"):
        tfam.interop.to_hf(hybrid(position="learned", class_token=True, pool="cls"))


def test_explain_totals_the_hybrid():
    table = tfam.explain("vit_hybrid_fashion_mnist")
    assert table.total_params == tfam.models.count_parameters("vit_hybrid_fashion_mnist")
    steps = [r.step for r in table.rows if r.level == 0]
    assert steps.index("stem conv 3x3 + BN + ReLU") < steps.index("patching")
