"""Hugging Face DeiT <-> tfam DeiT: parity of outputs (1e-5), round trips, refusals.

Tiny random ``transformers.DeiTConfig`` models (never downloaded), weights redrawn at unit
scale (as tests/interop/test_hf_vit.py) so a wrong mapping ([CLS] and [DIST] swapped, the
heads swapped) moves the outputs far more than the tolerance.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from torch import nn  # noqa: E402

import tfam  # noqa: E402
from tfam.interop import from_hf, to_hf  # noqa: E402
from tfam.models import DeiT  # noqa: E402

ATOL = 1e-5
pytestmark = pytest.mark.usefixtures("one_thread")


def hf_config(**values: object) -> transformers.DeiTConfig:
    base = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
                image_size=16, patch_size=4, num_channels=3, num_labels=5,
                attn_implementation="eager")  # fmt: skip
    base.update(values)
    return transformers.DeiTConfig(**base)


def randomize(module: nn.Module) -> nn.Module:
    """Unit-scale random weights: norm gains near 1, biases 0.2, matrices 1/sqrt(fan_in),
    tokens and positions 0.5."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.ndim == 1 and "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif p.ndim == 1:
                p.copy_(0.2 * torch.randn_like(p))
            elif p.ndim == 3:
                p.copy_(0.5 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / p[0].numel() ** 0.5)
    return module


# HF DeiT's default layer_norm_eps is 1e-12; a 1e-6 case checks that eps is carried.
CASES = {
    "default_eps": dict(),
    "eps_1e-6_no_qkv_bias": dict(layer_norm_eps=1e-6, qkv_bias=False),
    "non_square": dict(image_size=(16, 8), patch_size=(4, 2), num_attention_heads=2),
}


@pytest.mark.parametrize("attention", ["math", "sdpa"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_with_teacher_parity_and_back(case: str, attention: str) -> None:
    torch.manual_seed(0)
    cfg = hf_config(**CASES[case])
    hf = randomize(transformers.DeiTForImageClassificationWithTeacher(cfg)).eval()
    model = from_hf(hf, attention=attention).eval()
    assert isinstance(model, DeiT) and model.config.distilled
    assert model.config.norm_eps == cfg.layer_norm_eps
    x = torch.randn(2, 3, *model.config.image_size)
    with torch.no_grad():
        out = hf(pixel_values=x)
        cls_logits, dist_logits = model(x, both=True)
        torch.testing.assert_close(model.forward_features(x),
                                   hf.deit(pixel_values=x).last_hidden_state,
                                   rtol=0, atol=ATOL)  # fmt: skip
        torch.testing.assert_close(model(x), out.logits, rtol=0, atol=ATOL)
        torch.testing.assert_close(cls_logits, out.cls_logits, rtol=0, atol=ATOL)
        torch.testing.assert_close(dist_logits, out.distillation_logits, rtol=0, atol=ATOL)
        assert (out.cls_logits - out.distillation_logits).abs().max() > 0.5  # heads differ
        back = to_hf(model).eval()
        assert type(back) is transformers.DeiTForImageClassificationWithTeacher
        for key, value in hf.state_dict().items():
            torch.testing.assert_close(back.state_dict()[key], value, rtol=0, atol=0)
        torch.testing.assert_close(back(pixel_values=x).logits, out.logits, rtol=0, atol=ATOL)


def test_deit_model_parity_pooler_left_out_and_back() -> None:
    torch.manual_seed(0)
    hf = randomize(transformers.DeiTModel(hf_config())).eval()
    with pytest.warns(UserWarning, match="pooler"):
        model = from_hf(hf).eval()
    assert model.config.num_classes == 0
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        hidden = hf(pixel_values=x).last_hidden_state
        torch.testing.assert_close(model.forward_features(x), hidden, rtol=0, atol=ATOL)
        back = to_hf(model).eval()
        assert type(back) is transformers.DeiTModel and back.pooler is None
        torch.testing.assert_close(back(pixel_values=x).last_hidden_state, hidden,
                                   rtol=0, atol=ATOL)  # fmt: skip


def test_tfam_deit_to_hf_and_back() -> None:
    torch.manual_seed(0)
    model = tfam.create_model("deit", image_size=8, patch_size=4, in_channels=1, num_classes=3,
                              dim=16, depth=2, heads=2, attention="math").eval()  # fmt: skip
    hf = to_hf(model).eval()
    again = from_hf(hf).eval()
    x = torch.randn(2, 1, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(again(x), model(x), rtol=0, atol=ATOL)
        torch.testing.assert_close(hf(pixel_values=x).logits, model(x), rtol=0, atol=ATOL)


@pytest.mark.parametrize(
    "overrides,field",
    [({"distilled": False}, "distilled"), ({"pool": "mean"}, "pool"),
     ({"position": "sincos2d"}, "position")],
)  # fmt: skip
def test_to_hf_refuses_in_one_line(overrides: dict, field: str) -> None:
    model = tfam.create_model("deit", image_size=8, patch_size=4, in_channels=1, num_classes=3,
                              dim=16, depth=1, heads=2, **overrides)  # fmt: skip
    with pytest.raises(ValueError, match=f"^{field}=") as err:
        to_hf(model)
    assert "\n" not in str(err.value)


def test_deit_for_image_classification_is_refused_in_one_line() -> None:
    hf = transformers.DeiTForImageClassification(hf_config())
    with pytest.raises(ValueError, match="DeiTForImageClassification is invalid") as err:
        from_hf(hf)
    assert "\n" not in str(err.value)
