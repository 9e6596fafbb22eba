"""tfam.explain: exact parameters, traced shapes, hand-checked FLOPs, both block views."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file

import tfam
from tfam.explain import FLOPS_PER_ELEMENT, ExplainTable, explain
from tfam.models import count_parameters, create_config
from tfam.models.base import WEIGHTS_NAME

TOY = dict(image_size=(8, 12), patch_size=4, in_channels=1, dim=10, heads=2, depth=1, num_classes=3)


def level0(table: ExplainTable) -> list:
    return [r for r in table.rows if r.level == 0]


def row(table: ExplainTable, step: str, block: str = "") -> object:
    found = [r for r in table.rows if r.step == step and r.block == block]
    assert len(found) == 1, (step, block, [r.step for r in table.rows])
    return found[0]


def assert_consistent(table: ExplainTable) -> None:
    """Totals are the sums of the top-level rows, and the top-level rows form one pipeline:
    each step consumes what the previous one produced."""
    top = level0(table)
    assert table.total_params == sum(r.params for r in top)
    assert table.total_flops == sum(r.flops for r in top)
    for prev, cur in zip(top, top[1:]):
        assert cur.input_shape == prev.output_shape, (prev.step, cur.step)


@pytest.mark.parametrize(
    "name",
    [
        "vit_digits",
        "vit_fashion_mnist",
        "vit_tiny_patch16_224",
        "vit_base_patch16_224",
        "vit_base_patch32_224",
    ],
)
def test_total_params_equal_model_count_for_presets(name: str) -> None:
    table = explain(name)
    assert table.total_params == count_parameters(name)
    assert_consistent(table)


def test_vit_base_matches_published_parameter_count() -> None:
    # ViT-B/16 with a 1000-class head: 86,567,656 parameters (timm's vit_base_patch16_224).
    table = explain("vit_base_patch16_224")
    assert table.total_params == 86_567_656
    assert "86,567,656" in table.to_text()


@pytest.mark.parametrize(
    "overrides",
    [
        dict(image_size=(8, 12), patch_size=(2, 4)),  # non-square image and patches
        dict(pool="mean"),
        dict(pool="mean", class_token=False),
        dict(position="none"),
        dict(representation_size=24),
        dict(num_classes=0),
        dict(norm_first=False),
        dict(norm="rmsnorm", activation="swiglu", fused_qkv=False, qkv_bias=False),
        dict(depth=0),
    ],
)
def test_total_params_equal_real_model(overrides: dict) -> None:
    base = dict(image_size=8, patch_size=2, in_channels=3, dim=16, heads=4, depth=2, num_classes=5)
    torch.manual_seed(0)
    model = tfam.create_model("vit", **{**base, **overrides})
    by_model = explain(model)
    by_name = explain("vit", **{**base, **overrides})
    assert by_model.total_params == model.num_parameters() == by_name.total_params
    assert by_model.total_flops == by_name.total_flops
    assert_consistent(by_model)


@st.composite
def small_vit_configs(draw: st.DrawFn) -> dict:
    heads = draw(st.integers(1, 3))
    ph, pw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    class_token = draw(st.booleans())
    return dict(
        heads=heads,
        dim=heads * draw(st.integers(1, 4)),
        depth=draw(st.integers(0, 3)),
        ffn_dim=draw(st.integers(1, 20)),
        patch_size=(ph, pw),
        image_size=(ph * draw(st.integers(1, 3)), pw * draw(st.integers(1, 3))),
        in_channels=draw(st.integers(1, 3)),
        num_classes=draw(st.integers(0, 4)),
        class_token=class_token,
        pool=draw(st.sampled_from(["cls", "mean"])) if class_token else "mean",
        position=draw(st.sampled_from(["learned", "none"])),
        representation_size=draw(st.none() | st.integers(1, 6)),
        norm_first=draw(st.booleans()),
        norm=draw(st.sampled_from(["layernorm", "rmsnorm"])),
        activation=draw(st.sampled_from(["gelu", "relu", "swiglu", "geglu", "silu"])),
        fused_qkv=draw(st.booleans()),
        qkv_bias=draw(st.booleans()),
    )


@settings(max_examples=10, deadline=None)
@given(config=small_vit_configs(), batch=st.integers(1, 3))
def test_random_configs_exact_and_both_views_agree(config: dict, batch: int) -> None:
    model = tfam.create_model("vit", **config)
    first = explain(model, batch_size=batch)
    every = explain(model, batch_size=batch, blocks="all")
    assert first.total_params == every.total_params == model.num_parameters()
    assert first.total_flops == every.total_flops
    assert_consistent(first)
    assert_consistent(every)
    assert sum(r.step == "MHSA" for r in every.rows) == config["depth"]
    assert all(r.input_shape[0] == batch and r.output_shape[0] == batch for r in every.rows)


def test_vit_base_shapes() -> None:
    table = explain("vit_base_patch16_224", blocks="all")
    assert row(table, "patching").input_shape == (1, 3, 224, 224)
    assert row(table, "patching").output_shape == (1, 196, 768)  # 196 patches of 16*16*3
    assert row(table, "linear projection").output_shape == (1, 196, 768)
    assert row(table, "+ [CLS]").output_shape == (1, 197, 768)
    blocks = [r for r in level0(table) if r.block]
    assert {r.block for r in blocks} == {str(i) for i in range(1, 13)}
    for r in blocks:
        assert r.input_shape == r.output_shape == (1, 197, 768), (r.block, r.step)
    text = table.to_text()
    assert "196 x 768" in text and "197 x 768" in text and "12 x 197 x 197" in text


def test_toy_setting_of_the_seed() -> None:
    """6 patches, D = 10, 2 heads of width 5: the seed's worked example (plus [CLS])."""
    table = explain("vit", **TOY)
    assert table.symbols["N"] == 6 and table.symbols["D"] == 10
    assert table.symbols["H"] == 2 and table.symbols["Dh"] == 5
    assert row(table, "patching").output_shape == (1, 6, 4 * 4 * 1)
    assert row(table, "linear projection").output_shape == (1, 6, 10)
    assert row(table, "+ position").output_shape == (1, 7, 10)
    assert row(table, "Q, K, V projections", "1").output_shape == (1, 3, 2, 7, 5)
    assert row(table, "scores Q K^T / sqrt(Dh)", "1").output_shape == (1, 2, 7, 7)
    assert row(table, "concat heads", "1").output_shape == (1, 7, 10)
    assert "H = 2 heads of Dh = 5" in table.to_text()


@pytest.mark.parametrize("fused", [True, False])
def test_mhsa_and_mlp_flops_by_hand(fused: bool) -> None:
    b, n, d, h, dh, f = 2, 7, 10, 2, 5, 40  # batch, tokens N+1, D, heads, Dh, ffn_dim
    table = explain("vit", batch_size=b, fused_qkv=fused, **TOY)
    qkv = b * (2 * n * d * 3 * d + n * 3 * d)  # three D x D matmuls plus biases
    scores = b * h * (2 * n * n * dh + n * n)  # Q K^T plus the 1/sqrt(Dh) scaling
    softmax = FLOPS_PER_ELEMENT["softmax"] * b * h * n * n
    weighted = b * h * 2 * n * n * dh
    w_o = b * (2 * n * d * d + n * d)
    assert row(table, "Q, K, V projections", "1").flops == qkv == 8820
    assert row(table, "scores Q K^T / sqrt(Dh)", "1").flops == scores == 2156
    assert row(table, "softmax", "1").flops == softmax
    assert row(table, "weighted sum alpha V", "1").flops == weighted == 1960
    assert row(table, "W_O", "1").flops == w_o == 2940
    assert row(table, "MHSA", "1").flops == qkv + scores + softmax + weighted + w_o
    assert row(table, "MHSA", "1").params == 3 * (d * d + d) + d * d + d
    fc1, fc2 = b * (2 * n * d * f + n * f), b * (2 * n * f * d + n * d)
    gelu = FLOPS_PER_ELEMENT["gelu"] * b * n * f
    assert row(table, "MLP", "1").flops == fc1 + gelu + fc2
    assert row(table, "MLP", "1").params == (d * f + f) + (f * d + d)


def test_flops_scale_with_batch_and_shapes_lead_with_it() -> None:
    one, three = explain("vit", **TOY), explain("vit", batch_size=3, **TOY)
    assert three.total_flops == 3 * one.total_flops
    assert three.total_params == one.total_params
    text = three.to_text()
    assert "3 x 7 x 10" in text and "B x (N+1) x D" in text


def test_first_view_summarises_blocks_2_to_n() -> None:
    # Four blocks, whatever the preset's depth: block 1, then "2..4" summarised.
    first, every = explain("vit_digits", depth=4), explain("vit_digits", blocks="all", depth=4)
    summary = row(first, "same as block 1 (x 3)", "2..4")
    rest = [r for r in level0(every) if r.block in ("2", "3", "4")]
    assert summary.params == sum(r.params for r in rest)
    assert summary.flops == sum(r.flops for r in rest)
    assert [r.step for r in first.rows if r.block == "1"] == [
        r.step for r in every.rows if r.block == "2"
    ]
    single = explain("vit", **TOY)
    assert not any(".." in r.block for r in single.rows)


def test_first_view_says_when_blocks_differ() -> None:
    from tfam.config import BaseConfig
    from tfam.layers import FeedForward

    model = tfam.create_model("vit_digits", depth=4)
    model.blocks[2].mlp = FeedForward(
        BaseConfig(dim=64, heads=1, ffn_dim=256, activation="relu")
    )  # same parameters, cheaper activation
    first, every = explain(model), explain(model, blocks="all")
    summary = row(first, "blocks differ from block 1", "2..4")
    assert "--blocks all" in summary.note
    assert first.total_flops == every.total_flops
    assert row(every, "MLP", "3").flops < row(every, "MLP", "2").flops


def test_block_step_order_follows_the_norm_placement() -> None:
    pre = explain("vit", **TOY)
    post = explain("vit", norm_first=False, **TOY)
    steps = lambda t: [r.step for r in level0(t) if r.block == "1"]  # noqa: E731
    assert steps(pre) == ["LN", "MHSA", "residual", "LN", "MLP", "residual"]
    assert steps(post) == ["MHSA", "residual", "LN", "MLP", "residual", "LN"]


def test_text_and_json() -> None:
    table = explain("vit_base_patch16_224")
    text = str(table)
    assert text == table.to_text()
    assert "(N+1) x D" in text and "N x (P_h*P_w*C)" in text
    assert "sqrt(Dh)" in text and "the source documents write sqrt(D)" in text
    assert f"{table.total_flops:,}" in text
    data = json.loads(table.to_json())
    assert data["total_params"] == table.total_params
    assert len(data["rows"]) == len(table.rows)
    assert data["rows"][0]["output_shape"] == [1, 196, 768]
    assert sum(r["params"] for r in data["rows"] if r["level"] == 0) == table.total_params


def test_explaining_a_real_model_leaves_it_unchanged() -> None:
    torch.manual_seed(0)
    model = tfam.create_model("vit_digits", attention="math").train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    kernel = model.blocks[0].mhsa.kernel
    table = explain(model)
    assert table.total_params == model.num_parameters()
    assert model.training and all(m.training for m in model.modules())
    assert model.blocks[0].mhsa.kernel is kernel
    assert not any(m._forward_hooks for m in model.modules())
    after = model.state_dict()
    assert all(
        after[k].device.type == "cpu" and torch.equal(after[k], v) for k, v in before.items()
    )
    assert model.eval()(torch.randn(2, 1, 8, 8)).shape == (2, 10)


def _state(model: torch.nn.Module) -> dict:
    """Everything explain must leave alone: each parameter and buffer under every name (ties
    included, by identity) with its values, device, dtype and requires_grad; each module's
    train/eval flag and hooks."""
    tensors = [*model.named_parameters(remove_duplicate=False),
               *model.named_buffers(remove_duplicate=False)]  # fmt: skip
    return {
        "tensors": {n: (t, t.device, t.dtype, t.requires_grad) for n, t in tensors},
        "values": {n: t.detach().clone() for n, t in tensors if not t.is_meta},
        "modules": [
            (n, m, m.training, dict(m._forward_hooks), dict(m._forward_pre_hooks))
            for n, m in model.named_modules(remove_duplicate=False)
        ],  # fmt: skip
    }


def _assert_unchanged(before: dict, model: torch.nn.Module) -> None:
    after = _state(model)
    assert after["modules"] == before["modules"]
    assert after["tensors"].keys() == before["tensors"].keys()
    for name, (t, device, dtype, grad) in before["tensors"].items():
        now = after["tensors"][name]
        assert now[0] is t, f"{name} was replaced"
        assert now[1:] == (device, dtype, grad), f"{name}: {now[1:]} != {(device, dtype, grad)}"
    for name, value in before["values"].items():
        assert torch.equal(after["tensors"][name][0], value), f"{name} changed"


REAL_UP_TO = 3_000_000  # presets up to this size (transformer_tiny) are built full size


@pytest.mark.parametrize("name", tfam.list_models())
def test_explain_never_changes_the_model_it_is_given(name: str, tmp_path) -> None:
    """Every preset, built for real (full size when small, else shrunk like the preset
    contract's small version, same family and ties), explained: every parameter and buffer
    is the same tensor with the same values, device, dtype and requires_grad, every module
    keeps its mode and hooks, the total is ``parameters()``'s count (a tied weight once), and
    the model still saves and loads. Explaining ``transformer_tiny`` once left its shared
    embedding on the meta device and counted it twice."""
    small = {}
    if count_parameters(name) > REAL_UP_TO:
        config = create_config(name)
        small = tfam.models.MODEL_CLASSES[config.family].small_overrides(config)
    torch.manual_seed(0)
    model = tfam.create_model(name, **small).train()
    # A mix of states that explain must not reset: one module in eval, one frozen weight.
    list(model.modules())[1].eval()
    next(model.parameters()).requires_grad_(False)
    before = _state(model)
    table = explain(model)
    assert table.total_params == sum(p.numel() for p in model.parameters())
    _assert_unchanged(before, model)
    model.save_pretrained(tmp_path)  # "Cannot copy out of meta tensor" when explain broke it
    saved = load_file(tmp_path / WEIGHTS_NAME)  # tied weights are saved once, under one name
    state = model.state_dict()
    assert saved and all(torch.equal(t, state[k]) for k, t in saved.items())


@pytest.mark.parametrize("name", tfam.list_models())
def test_explain_leaves_a_meta_model_alone(name: str) -> None:
    """A full-size preset built on the meta device: same tensors, still meta, modes and hooks
    kept, and the total is ``parameters()``'s count."""
    with torch.device("meta"):
        model = tfam.create_model(name)
    before = _state(model)
    assert explain(model).total_params == sum(p.numel() for p in model.parameters())
    _assert_unchanged(before, model)


def test_explain_stack_leaves_the_stack_alone() -> None:
    from tfam.config import BaseConfig
    from tfam.layers import TransformerStack

    torch.manual_seed(0)
    stack = TransformerStack(BaseConfig(dim=8, heads=2, depth=2), kind="decoder").train()
    before = _state(stack)
    table = explain(stack, seq_len=3, memory_len=4)
    assert table.total_params == sum(p.numel() for p in stack.parameters())
    _assert_unchanged(before, stack)


def test_model_directory(tmp_path) -> None:
    model = tfam.create_model("vit_digits")
    model.save_pretrained(tmp_path)
    assert explain(str(tmp_path)).total_params == model.num_parameters()
    # Overrides apply as in from_pretrained (a wider image resamples the position table).
    wide = tfam.from_pretrained(tmp_path, image_size=(8, 12))
    assert explain(tmp_path, image_size=(8, 12)).total_params == wide.num_parameters()
    (tmp_path / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="config.json"):
        explain(tmp_path)


def test_bad_arguments_say_what_is_valid() -> None:
    with pytest.raises(ValueError, match="no_such_model.*vit_base_patch16_224"):
        explain("no_such_model")
    with pytest.raises(ValueError, match="blocks='some'.*first"):
        explain("vit_digits", blocks="some")
    with pytest.raises(ValueError, match="batch_size=0"):
        explain("vit_digits", batch_size=0)
    with pytest.raises(ValueError, match="heads=3"):
        explain("vit_digits", dim=10, heads=3)
    with pytest.raises(ValueError, match="'colour' is not a field"):
        explain("vit_digits", colour="red")
    with pytest.raises(ValueError, match="overrides"):
        explain(tfam.create_model("vit", **TOY), dim=12)


def test_table_cannot_drift_from_the_model() -> None:
    """A config that no longer describes the model (ffn_dim 128 claimed, 256 built) is caught
    by the check of traced shapes against their symbols."""
    model = tfam.create_model("vit_digits")
    model.config = model.config.replace(ffn_dim=128)
    with pytest.raises(RuntimeError, match="disagree"):
        explain(model)


def test_tfam_explain_stays_callable_after_the_module_is_imported() -> None:
    import importlib

    module = importlib.import_module("tfam.explain")  # the submodule, loaded again by name

    assert isinstance(tfam.explain("vit", **TOY), ExplainTable)
    assert isinstance(module.explain("vit", **TOY), ExplainTable)
