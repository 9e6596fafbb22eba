"""Configs are data: they validate at construction, name the bad field and value, and
round-trip through JSON."""

from __future__ import annotations

import json
import re

import pytest

import tfam
from tfam.config import BaseConfig
from tfam.models import create_config, list_models
from tfam.models.vit import ViTConfig

TINY = dict(image_size=8, patch_size=4, in_channels=1, num_classes=3, dim=8, depth=1, heads=2)


# ---------------------------------------------------------------------------------------------
# JSON round trip


@pytest.mark.parametrize("name", list_models("vit*"))
def test_every_vit_preset_round_trips_through_json(name):
    config = create_config(name)
    text = config.to_json()
    assert json.loads(text)["family"] == "vit"
    assert ViTConfig.from_json(text) == config
    assert BaseConfig.from_json(text) == config  # the family field picks the class


def test_round_trip_keeps_every_field(tmp_path):
    config = ViTConfig(
        image_size=(8, 12), patch_size=(4, 2), in_channels=2, num_classes=5, dim=12, depth=3,
        heads=3, ffn_dim=20, activation="swiglu", norm="rmsnorm", norm_eps=1e-5,
        norm_first=False, dropout=0.1, attn_dropout=0.2, drop_path=0.3, attention="math",
        qkv_bias=False, fused_qkv=False, init_std=0.01, pool="mean", class_token=False,
        position="none", pos_init_std=0.5, representation_size=7, final_norm=True,
    )  # fmt: skip
    d = config.to_dict()
    assert d["image_size"] == [8, 12] and d["patch_size"] == [4, 2]  # JSON has no tuples
    json.dumps(d)  # everything is JSON-serialisable
    back = BaseConfig.from_json(config.to_json())
    assert isinstance(back, ViTConfig)
    assert back == config
    assert back.image_size == (8, 12) and isinstance(back.image_size, tuple)
    # From a file path too.
    path = tmp_path / "config.json"
    path.write_text(config.to_json())
    assert ViTConfig.from_json(path) == config
    assert ViTConfig.from_json(str(path)) == config


def test_defaults_are_resolved():
    c = ViTConfig(image_size=8, patch_size=2, dim=16, heads=4)
    assert c.image_size == (8, 8) and c.patch_size == (2, 2)
    assert c.ffn_dim == 64 and c.head_dim == 4
    assert c.grid_size == (4, 4) and c.num_patches == 16 and c.patch_dim == 2 * 2 * 3
    assert c.final_norm is True
    assert ViTConfig(image_size=8, patch_size=2, norm_first=False).final_norm is False


def test_replace_validates():
    c = ViTConfig(**TINY)
    assert c.replace(depth=3).depth == 3
    with pytest.raises(ValueError, match=r"heads=3"):
        c.replace(heads=3)
    with pytest.raises(ValueError, match=r"'deep' is not a field of ViTConfig"):
        c.replace(deep=3)


def test_from_dict_errors():
    with pytest.raises(ValueError, match=r"family='resnet'"):
        BaseConfig.from_dict({"family": "resnet", "dim": 8})
    with pytest.raises(ValueError, match=r"'widht' is not a field of ViTConfig.*valid fields"):
        ViTConfig.from_json(json.dumps({"family": "vit", "widht": 8}))


# ---------------------------------------------------------------------------------------------
# Bad values name the field and the value


BAD_VALUES = [
    # (overrides, field, value as it must appear, other text that must appear)
    ({"image_size": 10, "patch_size": 4}, "patch_size", 4, ["image height 10"]),
    ({"image_size": (8, 10), "patch_size": 4}, "patch_size", 4, ["image width 10"]),
    ({"image_size": (8, 12), "patch_size": (4, 5)}, "patch_size", (4, 5), ["12"]),
    ({"dim": 10, "heads": 3}, "heads", 3, ["dim=10", "divisible"]),
    ({"activation": "tanh"}, "activation", "tanh", ["'gelu'", "'swiglu'"]),
    ({"norm": "groupnorm"}, "norm", "groupnorm", ["'layernorm'", "'batchnorm'", "'none'"]),
    ({"pool": "max"}, "pool", "max", ["'cls'", "'mean'"]),
    ({"position": "rope2d"}, "position", "rope2d", ["'learned'", "'none'"]),
    ({"attention": "flash3"}, "attention", "flash3", ["'math'", "'sdpa'"]),
    ({"pool": "cls", "class_token": False}, "pool", "cls", ["class_token"]),
    ({"image_size": 0}, "image_size", 0, ["positive"]),
    ({"image_size": (8, 8, 8)}, "image_size", (8, 8, 8), ["(height, width)"]),
    ({"patch_size": -4}, "patch_size", -4, ["positive"]),
    ({"in_channels": 0}, "in_channels", 0, ["positive"]),
    ({"dim": 0}, "dim", 0, ["positive"]),
    ({"heads": 0}, "heads", 0, ["positive"]),
    ({"depth": -1}, "depth", -1, ["non-negative"]),
    ({"num_classes": -1}, "num_classes", -1, ["non-negative"]),
    ({"dropout": 1.0}, "dropout", 1.0, ["[0, 1)"]),
    ({"drop_path": -0.1}, "drop_path", -0.1, ["[0, 1)"]),
    ({"norm_eps": 0}, "norm_eps", 0, ["(0, 1)"]),
    ({"init_std": 0}, "init_std", 0, ["positive"]),
    ({"representation_size": 0}, "representation_size", 0, ["positive"]),
    ({"ffn_dim": 2.5}, "ffn_dim", 2.5, ["int"]),
]


@pytest.mark.parametrize(
    "overrides,field,value,extra", BAD_VALUES, ids=[f"{b[1]}={b[2]!r}" for b in BAD_VALUES]
)
def test_bad_config_raises_value_error_naming_field_and_value(overrides, field, value, extra):
    values = {**TINY, **overrides}
    for build in (lambda: tfam.create_model("vit", **values), lambda: ViTConfig(**values)):
        with pytest.raises(ValueError, match=re.escape(f"{field}={value!r}")) as info:
            build()
        for part in extra:
            assert part in str(info.value), f"{part!r} not in {str(info.value)!r}"


@pytest.mark.parametrize("field", ["class_token", "norm_first", "qkv_bias", "fused_qkv"])
def test_bool_fields_reject_non_bools(field):
    """A hand-written JSON with "false" (a non-empty, so truthy, string) must not silently
    build the opposite model."""
    with pytest.raises(ValueError, match=re.escape(f"{field}='false'")):
        ViTConfig(**{**TINY, "pool": "mean", field: "false"})


def test_unknown_field_in_create_model_overrides():
    with pytest.raises(ValueError, match=r"'dimm' is not a field of ViTConfig") as info:
        tfam.create_model("vit", dimm=8)
    assert "dim" in str(info.value).split("valid fields:")[1]
    with pytest.raises(ValueError, match=r"'patch' is not a field"):
        tfam.create_model("vit_digits", patch=4)


@pytest.mark.parametrize("name", ["vit_gigantic_patch14", "resnet51", ""])
def test_unknown_model_name(name):
    with pytest.raises(ValueError, match=re.escape(f"model name {name!r} is unknown")) as info:
        tfam.create_model(name)
    assert "vit" in str(info.value)


def test_unknown_model_name_suggests_close_presets():
    with pytest.raises(ValueError, match="vit_digits"):
        tfam.create_model("vit_gigantic")


def test_list_models_and_presets():
    names = tfam.list_models()
    assert names == sorted(names)
    for expected in ("vit_tiny_patch16_224", "vit_small_patch16_224", "vit_base_patch16_224",
                     "vit_digits"):  # fmt: skip
        assert expected in names
    assert tfam.list_models("vit_*_patch16_224") == [
        n for n in names if re.fullmatch(r"vit_.*_patch16_224", n)
    ]
    assert tfam.list_models("nothing*") == []
    digits = create_config("vit_digits")
    assert (digits.image_size, digits.patch_size, digits.in_channels, digits.num_classes) == (
        (8, 8),
        (2, 2),
        1,
        10,
    )
    # Overrides win over preset values.
    assert create_config("vit_digits", depth=2).depth == 2


def test_model_config_is_the_config_it_was_built_from():
    model = tfam.create_model("vit", **TINY)
    assert model.config == ViTConfig(**TINY)
    assert model.config.family == "vit"
    with pytest.raises(TypeError, match="ViTConfig"):
        type(model)(BaseConfig())
