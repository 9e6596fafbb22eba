"""The CNN family (ResNet): torchvision's parameter counts, shapes, BatchNorm in train and eval
mode, derived fields, save/load."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tfam
from tfam.layers.conv import BasicLayer, BottleNeckLayer, ConvStem
from tfam.models import CNN, CNNConfig, count_parameters, create_model


@pytest.mark.parametrize(
    "name,count",
    # torchvision.models.resnet18/34/50(num_classes=1000).
    [("resnet18", 11_689_512), ("resnet34", 21_797_672), ("resnet50", 25_557_032)],
)
def test_torchvision_parameter_counts(name, count):
    assert count_parameters(name) == count


def tiny(**overrides) -> CNN:
    values = dict(
        image_size=8,
        in_channels=1,
        num_classes=3,
        stem="small",
        embedding_size=4,
        hidden_sizes=(4, 8),
        depths=(1, 2),
    )
    return create_model("cnn", **{**values, **overrides})


def test_shapes_and_derived_fields():
    torch.manual_seed(0)
    model = tiny()
    assert (model.config.dim, model.config.depth) == (8, 3)
    x = torch.randn(2, 1, 8, 8)
    assert model.forward_feature_map(x).shape == (2, 8, 4, 4)
    assert model.forward_features(x).shape == (2, 8)
    assert model(x).shape == (2, 3)
    # The ImageNet stem shrinks each side by 4, every stage after the first by 2.
    big = tiny(stem="resnet", image_size=32, layer_type="bottleneck", hidden_sizes=(8, 16))
    assert big.forward_feature_map(torch.randn(1, 1, 32, 32)).shape == (1, 16, 4, 4)
    assert tiny(num_classes=0)(x).shape == (2, 8)


def test_dim_and_depth_follow_the_stages():
    with pytest.raises(ValueError, match=r"dim=16 is invalid: a CNN's dim is hidden_sizes\[-1\]"):
        CNNConfig(hidden_sizes=(4, 8), depths=(1, 1), dim=16)
    with pytest.raises(ValueError, match="depths=.*one depth per stage"):
        CNNConfig(hidden_sizes=(4, 8), depths=(1,))
    config = CNNConfig(hidden_sizes=(4, 8), depths=(1, 1)).replace(
        hidden_sizes=(4, 8, 16), depths=(1, 1, 2)
    )
    assert (config.dim, config.depth) == (16, 4)
    again = tfam.config.BaseConfig.from_json(config.to_json())
    assert again == config


def test_bottleneck_puts_the_stride_on_the_3x3_by_default():
    block = BottleNeckLayer(8, 16, stride=2)
    strides = [layer.convolution.stride for layer in block.layer]
    assert strides == [(1, 1), (2, 2), (1, 1)]
    v1 = BottleNeckLayer(8, 16, stride=2, downsample_in_bottleneck=True)
    assert [layer.convolution.stride for layer in v1.layer] == [(2, 2), (1, 1), (1, 1)]
    assert isinstance(BasicLayer(8, 8).shortcut, nn.Identity)
    assert not isinstance(BasicLayer(8, 8, stride=2).shortcut, nn.Identity)
    assert isinstance(ConvStem(3, 8, "resnet").pooler, nn.MaxPool2d)


def test_batchnorm_uses_batch_statistics_in_training_and_running_ones_in_eval():
    torch.manual_seed(0)
    model = tiny()
    x = torch.randn(4, 1, 8, 8) * 3 + 1
    bn = model.embedder.embedder.normalization
    model.train()
    model(x)
    assert int(bn.num_batches_tracked) == 1
    assert not torch.allclose(bn.running_mean, torch.zeros_like(bn.running_mean))
    # Training mode: each image's output depends on the rest of the batch.
    assert not torch.allclose(model(x)[:1], model(x[:1]), atol=1e-5)
    model.eval()
    frozen = bn.running_mean.clone()
    # Eval mode: per-image outputs, running statistics left alone.
    torch.testing.assert_close(model(x)[:1], model(x[:1]), rtol=1e-5, atol=1e-6)
    assert torch.equal(bn.running_mean, frozen)


def test_init_and_no_weight_decay_on_batchnorm():
    from tfam.training.optim import split_decay

    torch.manual_seed(0)
    model = tiny(zero_init_residual=True)
    for m in model.modules():
        if isinstance(m, BasicLayer):
            assert torch.all(m.last_norm.weight == 0)
    decay, no_decay = split_decay(model)
    assert all(n.endswith("convolution.weight") or n == "head.weight" for n in decay)
    assert any("normalization" in n for n in no_decay) and "head.bias" in no_decay


def test_save_and_load_give_equal_outputs(tmp_path):
    torch.manual_seed(0)
    model = tiny()
    model.train()
    model(torch.randn(4, 1, 8, 8))  # moves the running statistics off their start
    model.eval()
    x = torch.randn(2, 1, 8, 8)
    model.save_pretrained(tmp_path)
    loaded = tfam.models.from_pretrained(tmp_path)
    assert torch.equal(loaded(x), model(x))


def test_set_attention_is_refused():
    with pytest.raises(ValueError, match="a CNN has no attention layers"):
        tiny().set_attention("math")


def test_explain_counts_each_conv():
    table = tfam.explain("resnet50")
    assert table.total_params == 25_557_032
    stem = table.rows[0]
    outputs = 64 * 112 * 112
    # 2 FLOPs per multiply-add over C_in * 7 * 7 inputs an output; BN 2, ReLU 1 per element.
    assert stem.flops == 2 * 3 * 7 * 7 * outputs + 2 * outputs + outputs
    blocks = [r for r in table.rows if r.level == 0 and r.block]
    assert [r.block for r in blocks][:3] == ["1.1", "1.2..3", "2.1"]
    assert blocks[1].step == "2 alike blocks"
