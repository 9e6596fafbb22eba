"""Hugging Face ResNet <-> tfam CNN: parity of outputs (eval mode, BatchNorm's running
statistics), round trips, refusals.

HF models come from tiny random ``transformers.ResNetConfig``s (never downloaded); every weight
and BatchNorm statistic is redrawn so that a wrong mapping (a swapped conv, a statistic left at
its start) moves the outputs far past 1e-5.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import tfam  # noqa: E402
from tfam.interop import from_hf, to_hf  # noqa: E402
from tfam.interop.hf_resnet import compare  # noqa: E402

ATOL = 1e-5

CASES = {
    "basic": dict(layer_type="basic", hidden_sizes=[8, 16], depths=[1, 2]),
    "bottleneck": dict(layer_type="bottleneck", hidden_sizes=[16, 32], depths=[2, 1]),
    "bottleneck_v1": dict(
        layer_type="bottleneck", hidden_sizes=[16, 32], depths=[1, 1], downsample_in_bottleneck=True
    ),
    "first_stage_down": dict(
        layer_type="basic", hidden_sizes=[8, 16], depths=[1, 1], downsample_in_first_stage=True
    ),
}


def hf_config(**values: object) -> transformers.ResNetConfig:
    base = dict(num_channels=3, embedding_size=8, num_labels=5)
    return transformers.ResNetConfig(**{**base, **values})


def randomize(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every parameter and BatchNorm statistic redrawn (variances positive)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if not t.is_floating_point():
                continue
            values = torch.randn(t.shape, generator=g) * 0.3
            if name.endswith("running_var"):
                values = values.abs() + 0.5
            t.copy_(values)
    return model


def images() -> torch.Tensor:
    return torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("case", sorted(CASES))
def test_classifier_parity_and_round_trip(case):
    hf = randomize(transformers.ResNetForImageClassification(hf_config(**CASES[case]))).eval()
    model = from_hf(hf, image_size=32)
    assert isinstance(model, tfam.models.CNN) and not model.training
    x = images()
    with torch.no_grad():
        theirs = hf(pixel_values=x).logits
        torch.testing.assert_close(model(x), theirs, rtol=0, atol=ATOL)
        assert compare(model, hf) <= ATOL
        back = to_hf(model).eval()
        assert type(back) is type(hf)
        torch.testing.assert_close(back(pixel_values=x).logits, theirs, rtol=0, atol=ATOL)
    for key, value in hf.state_dict().items():
        assert torch.equal(back.state_dict()[key], value), key


def test_backbone_parity_and_round_trip():
    hf = randomize(transformers.ResNetModel(hf_config(**CASES["bottleneck"]))).eval()
    model = from_hf(hf, image_size=32)
    assert model.config.num_classes == 0
    x = images()
    with torch.no_grad():
        out = hf(pixel_values=x)
        torch.testing.assert_close(model.forward_feature_map(x), out.last_hidden_state,
                                   rtol=0, atol=ATOL)  # fmt: skip
        torch.testing.assert_close(model(x), out.pooler_output.flatten(1), rtol=0, atol=ATOL)
        back = to_hf(model).eval()
        assert type(back) is transformers.ResNetModel
        assert compare(model, back) <= ATOL


def test_training_mode_batch_statistics_agree():
    """In training mode both use the batch's statistics and update their running ones alike."""
    hf = randomize(transformers.ResNetForImageClassification(hf_config(**CASES["basic"])))
    model = from_hf(hf.train(), image_size=32)
    assert model.training
    x = images()
    torch.testing.assert_close(model(x), hf(pixel_values=x).logits, rtol=0, atol=ATOL)
    ours = model.embedder.embedder.normalization.running_mean
    theirs = hf.resnet.embedder.embedder.normalization.running_mean
    torch.testing.assert_close(ours, theirs, rtol=0, atol=ATOL)


def test_the_weights_are_copies():
    hf = randomize(transformers.ResNetForImageClassification(hf_config(**CASES["basic"])))
    model = from_hf(hf)
    with torch.no_grad():
        model.head.weight.add_(1.0)
    assert not torch.equal(model.head.weight, hf.classifier[1].weight)


def test_the_small_stem_is_refused_in_one_line():
    model = tfam.create_model("resnet_digits")
    with pytest.raises(
        ValueError, match=r"^stem='small' cannot be converted to Hugging Face ResNet: "
    ) as err:
        to_hf(model)
    assert "\n" not in str(err.value)
    eps = tfam.create_model(
        "resnet18",
        norm_eps=1e-3,
        **tfam.models.CNN.small_overrides(tfam.models.create_config("resnet18")),
    )
    with pytest.raises(ValueError, match=r"norm_eps=0.001 cannot be converted"):
        to_hf(eps)


def test_an_unknown_activation_is_refused():
    hf = transformers.ResNetModel(hf_config(hidden_act="tanh", **CASES["basic"]))
    with pytest.raises(ValueError, match="hidden_act='tanh' is invalid for conversion"):
        from_hf(hf)
