"""DeiT: the distillation token, the two heads and their average, the presets' sizes.

The family and preset contracts cover features -> head == forward, explain's totals, JSON and
save/load; here what is DeiT's own."""

from __future__ import annotations

import os

import pytest
import torch

import tfam
from tfam.models import DeiT, ViT, count_parameters

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(**overrides: object) -> DeiT:
    torch.manual_seed(0)
    values = dict(image_size=8, patch_size=4, in_channels=1, num_classes=5, dim=16, depth=2,
                  heads=2, attention="math")  # fmt: skip
    return tfam.create_model("deit", **{**values, **overrides}).eval()


def test_tokens_are_cls_dist_then_patches_with_a_table_of_n_plus_2() -> None:
    m = tiny()
    assert m.num_prefix_tokens == 2 and m.pos_embed.shape == (1, 4 + 2, 16)
    x = torch.randn(3, 1, 8, 8)
    tokens = m.embed(x)
    torch.testing.assert_close(
        tokens[:, 0], (m.cls_token + m.pos_embed[:, 0]).expand(3, 1, 16)[:, 0]
    )
    torch.testing.assert_close(
        tokens[:, 1], (m.dist_token + m.pos_embed[:, 1]).expand(3, 1, 16)[:, 0]
    )


@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_prediction_is_the_average_of_the_two_heads(pool: str) -> None:
    m = tiny(pool=pool)
    x = torch.randn(3, 1, 8, 8)
    features = m.forward_features(x)
    cls_logits, dist_logits = m.forward_head(features, both=True)
    pooled = features[:, 0] if pool == "cls" else features[:, 2:].mean(dim=1)
    torch.testing.assert_close(cls_logits, m.head(pooled))
    torch.testing.assert_close(dist_logits, m.head_dist(features[:, 1]))
    # The fast path (the last block computes [CLS] and [DIST] only) gives the same.
    torch.testing.assert_close(m(x), (cls_logits + dist_logits) / 2, rtol=1e-5, atol=1e-6)
    both = m(x, both=True)
    torch.testing.assert_close(both[0], cls_logits, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(both[1], dist_logits, rtol=1e-5, atol=1e-6)


def test_without_class_token_the_distillation_token_comes_first() -> None:
    m = tiny(class_token=False, pool="mean")
    assert m.num_prefix_tokens == 1 and m.dist_index == 0
    features = m.forward_features(torch.randn(2, 1, 8, 8))
    torch.testing.assert_close(m.forward_head(features, both=True)[1], m.head_dist(features[:, 0]))


def test_undistilled_deit_is_vit_and_refuses_both() -> None:
    m = tiny(distilled=False)
    vit = tfam.create_model("vit", **{k: v for k, v in m.config.to_dict().items()
                                      if k not in ("family", "distilled")})  # fmt: skip
    assert m.state_dict().keys() == vit.state_dict().keys()
    vit.load_state_dict(m.state_dict())
    x = torch.randn(2, 1, 8, 8)
    torch.testing.assert_close(m(x), vit.eval()(x))
    with pytest.raises(ValueError, match="both=True is invalid .*distilled=False"):
        m(x, both=True)


def test_representation_size_is_refused_with_two_heads() -> None:
    with pytest.raises(ValueError, match="representation_size"):
        tiny(representation_size=8)


# Hugging Face's counts, measured from random-weight models built from the configs below
# (DeiTForImageClassificationWithTeacher for the distilled presets; the undistilled DeiTs are
# ViT's architecture: the checkpoints facebook/deit-*-patch16-224 are ViTForImageClassification).
SIZES = {"tiny": (192, 3), "small": (384, 6), "base": (768, 12)}


@pytest.mark.parametrize("size", list(SIZES))
def test_preset_parameter_counts_equal_hugging_face(size: str) -> None:
    transformers = pytest.importorskip("transformers")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    d, h = SIZES[size]
    kw = dict(hidden_size=d, num_attention_heads=h, num_hidden_layers=12, intermediate_size=4 * d,
              num_labels=1000)  # fmt: skip
    with torch.device("meta"):
        teacher = transformers.DeiTForImageClassificationWithTeacher(transformers.DeiTConfig(**kw))
        plain = transformers.ViTForImageClassification(transformers.ViTConfig(**kw))
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count_parameters(f"deit_{size}_distilled_patch16_224") == count(teacher)
    assert count_parameters(f"deit_{size}_patch16_224") == count(plain)


def test_deit_is_its_own_family() -> None:
    assert isinstance(tiny(), ViT) and tfam.models.MODEL_CLASSES["deit"] is DeiT
    assert tiny().config.family == "deit"
