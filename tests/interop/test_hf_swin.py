"""Hugging Face Swin <-> tfam Swin: parity of outputs, round trips, refusals, `tfam convert`.

Every HF model here is built from a tiny ``transformers.SwinConfig`` with random weights
(never downloaded), redrawn at a scale where attention is far from uniform, so a wrong mapping
(q and k swapped, the merge order, the bias index) moves the outputs far past 1e-5.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

transformers = pytest.importorskip("transformers")

import tfam  # noqa: E402
from tfam.interop import from_hf, to_hf  # noqa: E402
from tfam.models import Swin  # noqa: E402

ATOL = 1e-5

pytestmark = pytest.mark.usefixtures("one_thread")

# (SwinConfig values): grids per stage in the comments.
CASES = {
    # 16x16 -> 8x8 -> 4x4, window 4: regular and shifted stages, the last one window
    "plain": dict(image_size=32, depths=[2, 2, 2], num_heads=[2, 4, 8], window_size=4),
    # 18x18 pads to 20x20 (window 4), 9x9 merges odd and pads to 12x12
    "padding": dict(image_size=36, depths=[2, 2], num_heads=[2, 4], window_size=4),
    # 14x10 -> 7x5 (window 3: pads 7 -> 9, 5 -> 6), non-square, absolute positions
    "non_square": dict(
        image_size=(28, 20),
        depths=[2, 2],
        num_heads=[2, 4],
        window_size=3,
        use_absolute_embeddings=True,
    ),  # fmt: skip
    "no_qkv_bias": dict(image_size=16, depths=[2], num_heads=[2], window_size=4, qkv_bias=False),
}


def hf_config(**values: object) -> transformers.SwinConfig:
    base = dict(embed_dim=16, patch_size=2, num_channels=3, num_labels=5, mlp_ratio=2.0,
                drop_path_rate=0.0)  # fmt: skip
    return transformers.SwinConfig(**{**base, **values})


def randomized(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return module


def images(config: transformers.SwinConfig, batch: int = 2) -> torch.Tensor:
    size = config.image_size
    size = (size, size) if isinstance(size, int) else tuple(size)
    return torch.randn(
        batch, config.num_channels, *size, generator=torch.Generator().manual_seed(1)
    )


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("attention", ["sdpa", "math"])
def test_from_hf_classification_parity(case: str, attention: str) -> None:
    cfg = hf_config(**CASES[case])
    hf = randomized(transformers.SwinForImageClassification(cfg)).eval()
    model = from_hf(hf, attention=attention).eval()
    assert isinstance(model, Swin) and model.config.attention == attention
    x = images(cfg)
    with torch.no_grad():
        torch.testing.assert_close(model(x), hf(pixel_values=x).logits, rtol=ATOL, atol=ATOL)
        hidden = hf.swin(pixel_values=x).last_hidden_state
        torch.testing.assert_close(model.forward_features(x), hidden, rtol=ATOL, atol=ATOL)
    again = to_hf(model).eval()
    assert type(again) is transformers.SwinForImageClassification
    with torch.no_grad():
        torch.testing.assert_close(
            again(pixel_values=x).logits, hf(pixel_values=x).logits, rtol=ATOL, atol=ATOL
        )


def test_from_hf_swin_model_is_the_pooled_features() -> None:
    cfg = hf_config(**CASES["padding"])
    hf = randomized(transformers.SwinModel(cfg)).eval()
    model = from_hf(hf).eval()
    assert model.config.num_classes == 0
    x = images(cfg)
    with torch.no_grad():
        out = hf(pixel_values=x)
        torch.testing.assert_close(model(x), out.pooler_output, rtol=ATOL, atol=ATOL)
        back = to_hf(model).eval()
        assert type(back) is transformers.SwinModel
        torch.testing.assert_close(back(pixel_values=x).pooler_output, out.pooler_output)


def test_parity_check_detects_a_wrong_mapping() -> None:
    """The tests above could not pass with the bias index transposed or the merge order
    swapped: each moves the output far past the tolerance."""
    cfg = hf_config(**CASES["plain"])
    hf = randomized(transformers.SwinForImageClassification(cfg)).eval()
    x = images(cfg)
    with torch.no_grad():
        expected = hf.swin(pixel_values=x).last_hidden_state
        model = from_hf(hf).eval()
        assert (model.forward_features(x) - expected).abs().max() < ATOL
        table = model.encoder.stages[0].blocks[0].mhsa.bias_provider.table
        ws = 4
        flipped = table.view(2 * ws - 1, 2 * ws - 1, -1).transpose(0, 1).reshape(table.shape)
        table.copy_(flipped)  # (dy, dx) read as (dx, dy)
        assert (model.forward_features(x) - expected).abs().max() > 100 * ATOL
        model = from_hf(hf).eval()
        w = model.encoder.stages[1].downsample.reduction.weight
        w.copy_(w.view(w.shape[0], 4, -1)[:, [0, 2, 1, 3]].reshape(w.shape))  # (1,0) <-> (0,1)
        assert (model.forward_features(x) - expected).abs().max() > 100 * ATOL


def test_config_mapping() -> None:
    cfg = hf_config(**CASES["non_square"], hidden_act="gelu_new", drop_path_rate=0.2)
    model = from_hf(transformers.SwinForImageClassification(cfg))
    c = model.config
    assert (c.dim, c.heads, c.depths, c.window, c.ffn_dim) == (16, 2, (2, 2), 3, 32)
    assert (c.image_size, c.patch_size, c.num_classes) == ((28, 20), (2, 2), 5)
    assert (c.position, c.activation, c.drop_path, c.norm_eps) == (
        "learned",
        "gelu_tanh",
        0.2,
        1e-5,
    )


@pytest.mark.parametrize(
    "values, message",
    [
        (dict(num_heads=[2, 2], depths=[1, 1]), r"num_heads=\[2, 2\] is invalid for conversion"),
        (dict(layer_norm_eps=1e-6), "layer_norm_eps=1e-06 is invalid for conversion"),
        (dict(mlp_ratio=2.1, embed_dim=6, num_heads=[1, 2], depths=[1, 1]),
         "mlp_ratio=2.1 is invalid for conversion"),
        (dict(image_size=24, window_size=7, depths=[1, 1], num_heads=[2, 4]),
         "window_size=7 is invalid for conversion: stage 2 runs on a 6x6 grid"),
    ],
)  # fmt: skip
def test_from_hf_refuses_what_tfam_cannot_compute(values: dict, message: str) -> None:
    base = {**CASES["plain"], **values}
    hf = transformers.SwinForImageClassification(hf_config(**base))
    with pytest.raises(ValueError, match=message) as err:
        from_hf(hf)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(norm="rmsnorm"), "norm='rmsnorm' cannot be converted to Hugging Face Swin"),
        (dict(norm_eps=1e-6), "norm_eps=1e-06 cannot be converted"),
        (dict(activation="swiglu"), "activation='swiglu' cannot be converted"),
        (dict(position="sincos2d"), "position='sincos2d' cannot be converted"),
        (dict(attention="linear"), "attention='linear' cannot be converted"),
        (dict(image_size=24, window=7), "window=7 is invalid for conversion"),
    ],
)
def test_to_hf_refuses_what_hf_cannot_compute(overrides: dict, message: str) -> None:
    values = dict(image_size=32, patch_size=2, num_classes=3, dim=16, heads=2, depths=(1, 1),
                  window=4)  # fmt: skip
    model = tfam.create_model("swin", **{**values, **overrides})
    with pytest.raises(ValueError, match=message) as err:
        to_hf(model)
    assert "\n" not in str(err.value)


def test_to_hf_says_hf_drops_only_the_attention_branch() -> None:
    # The small preset's sine-cosine positions have no HF counterpart; the test is drop-path's.
    model = tfam.create_model("swin_digits", drop_path=0.1, position="none")
    with pytest.warns(UserWarning, match="drops the attention branch only"):
        hf = to_hf(model)
    assert hf.config.drop_path_rate == 0.1


def test_tfam_convert_both_ways(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    from tfam.cli import convert

    parser = argparse.ArgumentParser(prog="tfam")
    convert.register(parser.add_subparsers())

    def cli(*argv: str) -> int:
        args = parser.parse_args(["convert", *argv])
        return args.func(args)

    cfg = hf_config(**CASES["padding"])
    hf = randomized(transformers.SwinForImageClassification(cfg)).eval()
    hf.save_pretrained(tmp_path / "hf")
    assert cli("hf-to-tfam", str(tmp_path / "hf"), str(tmp_path / "tfam")) == 0
    assert "(ok," in capsys.readouterr().out
    model = tfam.from_pretrained(tmp_path / "tfam")
    x = images(cfg)
    with torch.no_grad():
        torch.testing.assert_close(model(x), hf(pixel_values=x).logits, rtol=ATOL, atol=ATOL)
    assert cli("tfam-to-hf", str(tmp_path / "tfam"), str(tmp_path / "hf2")) == 0
    back = transformers.SwinForImageClassification.from_pretrained(tmp_path / "hf2").eval()
    with torch.no_grad():
        torch.testing.assert_close(back(pixel_values=x).logits, hf(pixel_values=x).logits)
