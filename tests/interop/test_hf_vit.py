"""Hugging Face ViT <-> tfam ViT: parity of outputs, round trips, refusals.

Every HF model here is built from a tiny ``transformers.ViTConfig`` with random weights (never
downloaded). Weights are redrawn at unit scale (``randomize``) so that attention is far from
uniform and a wrong mapping (q and k swapped, heads permuted, a wrong eps) moves the outputs
by far more than the 1e-5 tolerance; ``test_parity_check_detects_a_wrong_mapping`` shows it.
"""

from __future__ import annotations

import os
import re
import sys
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from torch import nn  # noqa: E402

import tfam  # noqa: E402
from tfam.interop import from_hf, to_hf  # noqa: E402
from tfam.interop.hf_vit import canonical_hf_key  # noqa: E402
from tfam.layers import KERNELS  # noqa: E402
from tfam.layers.kernels import MathKernel  # noqa: E402

ATOL = 1e-5


pytestmark = pytest.mark.usefixtures("one_thread")


# Tiny HF configs: (name, ViTConfig values). Image (24, 16) is 3x4 patches of (8, 4).
CASES = {
    "square": dict(hidden_size=32, num_attention_heads=4, image_size=16, patch_size=4),
    "non_square_image": dict(
        hidden_size=32, num_attention_heads=4, image_size=(24, 16), patch_size=8
    ),
    "non_square_patch": dict(
        hidden_size=32, num_attention_heads=4, image_size=(24, 16), patch_size=(8, 4)
    ),
    "odd_heads_5": dict(hidden_size=60, num_attention_heads=5, image_size=16, patch_size=4),
    "odd_heads_3": dict(hidden_size=60, num_attention_heads=3, image_size=16, patch_size=8),
    "no_qkv_bias": dict(
        hidden_size=32, num_attention_heads=4, image_size=16, patch_size=4, qkv_bias=False
    ),
}


def hf_config(**values: object) -> transformers.ViTConfig:
    base = dict(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        image_size=16,
        patch_size=4,
        num_channels=3,
        num_labels=5,
        layer_norm_eps=1e-6,
        attn_implementation="eager",
    )
    base.update(values)
    return transformers.ViTConfig(**base)


def randomize(module: nn.Module) -> nn.Module:
    """Unit-scale random weights (from the global RNG, seeded by the caller): norm gains near
    1, biases of 0.2, matrices with std 1/sqrt(fan_in), [CLS] and positions of 0.5."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.ndim == 1 and ("norm" in name) and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif p.ndim == 1:
                p.copy_(0.2 * torch.randn_like(p))
            elif p.ndim == 3:  # cls token, position table
                p.copy_(0.5 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / p[0].numel() ** 0.5)
    return module


def images(cfg: transformers.ViTConfig, batch: int = 2, size: tuple[int, int] | None = None):
    h, w = size or (
        (cfg.image_size, cfg.image_size) if isinstance(cfg.image_size, int) else cfg.image_size
    )
    return torch.randn(batch, cfg.num_channels, h, w)


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a - b).abs().max().item()


@pytest.mark.parametrize("attention", ["math", "sdpa"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_from_hf_classification_parity(case: str, attention: str) -> None:
    """Logits and last hidden states of ViTForImageClassification equal tfam's to 1e-5."""
    torch.manual_seed(0)
    cfg = hf_config(**CASES[case])
    hf = randomize(transformers.ViTForImageClassification(cfg)).eval()
    model = from_hf(hf, attention=attention).eval()
    assert model.config.attention == attention
    x = images(cfg)
    with torch.no_grad():
        out = hf(pixel_values=x, output_hidden_states=True)
        hidden = hf.vit(pixel_values=x).last_hidden_state
        logits = model(x)
        tokens = model.forward_features(x)
    assert logits.shape == (2, 5)
    assert max_diff(tokens, hidden) < ATOL
    assert max_diff(logits, out.logits) < ATOL
    # the outputs are not trivially small: a 1e-5 agreement means something
    assert out.logits.abs().max() > 0.5


@pytest.mark.parametrize("fused_qkv", [True, False])
def test_from_hf_fused_and_unfused_qkv(fused_qkv: bool) -> None:
    torch.manual_seed(1)
    cfg = hf_config(**CASES["non_square_patch"])
    hf = randomize(transformers.ViTForImageClassification(cfg)).eval()
    model = from_hf(hf, fused_qkv=fused_qkv).eval()
    mhsa = model.blocks[0].mhsa
    assert hasattr(mhsa, "qkv") == fused_qkv and hasattr(mhsa, "q_proj") != fused_qkv
    if fused_qkv:  # rows [W_Q; W_K; W_V]
        att = hf.vit.layers[0].attention
        expected = torch.cat([att.q_proj.weight, att.k_proj.weight, att.v_proj.weight])
        assert torch.equal(mhsa.qkv.weight, expected)
    x = images(cfg)
    with torch.no_grad():
        assert max_diff(model(x), hf(pixel_values=x).logits) < ATOL


@pytest.mark.parametrize("attention", ["math", "sdpa"])
@pytest.mark.parametrize("pooler", ["none", "same_width", "other_width"])
def test_from_hf_vit_model_parity(pooler: str, attention: str) -> None:
    """ViTModel: last_hidden_state == forward_features, pooler_output == forward_head."""
    torch.manual_seed(2)
    extra = {"pooler_output_size": 24} if pooler == "other_width" else {}
    cfg = hf_config(**CASES["non_square_patch"], **extra)
    hf = randomize(transformers.ViTModel(cfg, add_pooling_layer=pooler != "none")).eval()
    model = from_hf(hf, attention=attention).eval()
    assert model.config.num_classes == 0
    x = images(cfg)
    with torch.no_grad():
        out = hf(pixel_values=x)
        tokens = model.forward_features(x)
        pooled = model.forward_head(tokens)
        logits = model(x)  # the last block for [CLS] only: equal up to float rounding
    assert max_diff(logits, pooled) < ATOL
    assert max_diff(tokens, out.last_hidden_state) < ATOL
    if pooler == "none":
        assert out.pooler_output is None
        assert model.config.representation_size is None
        assert torch.equal(pooled, tokens[:, 0])
        assert max_diff(logits, out.last_hidden_state[:, 0]) < ATOL
    else:
        width = 24 if pooler == "other_width" else 32
        assert model.config.representation_size == width
        assert pooled.shape == (2, width)
        assert max_diff(pooled, out.pooler_output) < ATOL
        assert max_diff(logits, out.pooler_output) < ATOL


def test_from_hf_classification_without_labels() -> None:
    """num_labels=0 (an Identity classifier): logits are the normed [CLS] token, num_classes=0."""
    torch.manual_seed(14)
    cfg = hf_config(num_labels=0)
    hf = randomize(transformers.ViTForImageClassification(cfg)).eval()
    model = from_hf(hf).eval()
    assert model.config.num_classes == 0 and isinstance(model.head, nn.Identity)
    x = images(cfg)
    with torch.no_grad():
        assert max_diff(model(x), hf(pixel_values=x).logits) < ATOL


def test_config_mapping() -> None:
    """Every HF config field lands on its tfam field."""
    cfg = hf_config(
        hidden_size=60,
        num_hidden_layers=3,
        num_attention_heads=5,
        intermediate_size=70,
        hidden_act="gelu_new",
        layer_norm_eps=1e-3,
        qkv_bias=False,
        image_size=(24, 16),
        patch_size=(8, 4),
        num_channels=2,
        num_labels=7,
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.2,
        initializer_range=0.03,
    )
    c = from_hf(transformers.ViTForImageClassification(cfg)).config
    assert (c.dim, c.depth, c.heads, c.ffn_dim) == (60, 3, 5, 70)
    assert (c.activation, c.norm_eps, c.qkv_bias) == ("gelu_tanh", 1e-3, False)
    assert (c.image_size, c.patch_size, c.in_channels, c.num_classes) == ((24, 16), (8, 4), 2, 7)
    assert (c.dropout, c.attn_dropout, c.init_std, c.pos_init_std) == (0.1, 0.2, 0.03, 0.03)
    assert (c.pool, c.class_token, c.position, c.norm, c.norm_first) == (
        "cls",
        True,
        "learned",
        "layernorm",
        True,
    )


def test_dropout_in_train_mode_follows_hf() -> None:
    """Converted in train mode, dropout masks are drawn where HF draws them: same seed, same
    outputs (the dropout probabilities and places map one to one)."""
    torch.manual_seed(3)
    cfg = hf_config(hidden_dropout_prob=0.25, attn_implementation="sdpa")
    hf = randomize(transformers.ViTForImageClassification(cfg)).train()
    model = from_hf(hf)
    assert model.training
    x = images(cfg)
    torch.manual_seed(10)
    a = model(x)
    torch.manual_seed(10)
    b = hf(pixel_values=x).logits
    torch.manual_seed(11)
    c = model(x)
    assert max_diff(a, b) < ATOL
    assert max_diff(a, c) > 1e-3  # dropout is really on


@pytest.mark.parametrize(
    "hidden_act", ["gelu", "gelu_python", "gelu_new", "gelu_pytorch_tanh", "relu", "silu", "swish"]
)
def test_activations(hidden_act: str) -> None:
    torch.manual_seed(4)
    cfg = hf_config(hidden_act=hidden_act)
    hf = randomize(transformers.ViTForImageClassification(cfg)).eval()
    model = from_hf(hf).eval()
    x = images(cfg)
    with torch.no_grad():
        assert max_diff(model(x), hf(pixel_values=x).logits) < ATOL


def test_refuses_what_tfam_cannot_represent() -> None:
    with pytest.raises(ValueError, match=r"hidden_act='mish'.*'gelu'"):
        from_hf(transformers.ViTModel(hf_config(hidden_act="mish")))
    with pytest.raises(ValueError, match=r"pooler_act='relu'.*tanh"):
        from_hf(transformers.ViTModel(hf_config(pooler_act="relu")))
    # without a pooler the pooler activation is irrelevant
    from_hf(transformers.ViTModel(hf_config(pooler_act="relu"), add_pooling_layer=False))
    with pytest.raises(ValueError, match=r"ViTForMaskedImageModeling.*hf_model\.vit"):
        from_hf(transformers.ViTForMaskedImageModeling(hf_config(encoder_stride=4)))
    with pytest.raises(ValueError, match=r"hf_model=Linear.*model_type=None"):
        from_hf(nn.Linear(2, 2))


def test_mask_token_is_dropped() -> None:
    """ViTModel(use_mask_token=True): the mask token only acts with bool_masked_pos, so the
    encoder converts and matches without it."""
    torch.manual_seed(5)
    cfg = hf_config()
    hf = randomize(transformers.ViTModel(cfg, use_mask_token=True)).eval()
    model = from_hf(hf).eval()
    assert all("mask" not in name for name in model.state_dict())
    x = images(cfg)
    with torch.no_grad():
        assert max_diff(model.forward_features(x), hf(pixel_values=x).last_hidden_state) < ATOL


def test_converted_weights_are_copies() -> None:
    cfg = hf_config()
    hf = transformers.ViTForImageClassification(cfg)
    model = from_hf(hf, fused_qkv=False)
    with torch.no_grad():
        hf.vit.layers[0].attention.q_proj.weight.add_(1.0)
        hf.vit.embeddings.cls_token.add_(1.0)
    assert not torch.equal(
        model.blocks[0].mhsa.q_proj.weight, hf.vit.layers[0].attention.q_proj.weight
    )
    assert not torch.equal(model.cls_token, hf.vit.embeddings.cls_token)


def test_parity_check_detects_a_wrong_mapping() -> None:
    """Swapping W_Q and W_K (a plausible mapping bug) moves the logits far past 1e-5."""
    torch.manual_seed(6)
    cfg = hf_config()
    hf = randomize(transformers.ViTForImageClassification(cfg)).eval()
    model = from_hf(hf, fused_qkv=False).eval()
    x = images(cfg)
    with torch.no_grad():
        right = model(x)
        mhsa = model.blocks[0].mhsa
        q = mhsa.q_proj.weight.clone()
        mhsa.q_proj.weight.copy_(mhsa.k_proj.weight)
        mhsa.k_proj.weight.copy_(q)
        wrong = model(x)
        reference = hf(pixel_values=x).logits
    assert max_diff(right, reference) < ATOL
    assert max_diff(wrong, reference) > 1e-3


def test_attention_weights_match_hf_output_attentions() -> None:
    """model(x, return_attention=True) == HF output_attentions=True (eager), every block."""
    torch.manual_seed(7)
    cfg = hf_config(**CASES["non_square_patch"], num_hidden_layers=3)
    hf = randomize(transformers.ViTForImageClassification(cfg)).eval()
    model = from_hf(hf, attention="sdpa").eval()
    x = images(cfg)
    with torch.no_grad():
        logits, weights = model(x, return_attention=True)
        out = hf(pixel_values=x, output_attentions=True)
    assert len(weights) == len(out.attentions) == 3
    for ours, theirs in zip(weights, out.attentions):
        assert ours.shape == (2, 4, 13, 13)  # [CLS] + 3x4 patches
        assert max_diff(ours, theirs) < ATOL
    # rows sum to 1 and are far from uniform, so the comparison has something to compare
    assert torch.allclose(weights[0].sum(-1), torch.ones(2, 4, 13))
    assert weights[0].max() > 0.3
    assert max_diff(logits, out.logits) < ATOL


@pytest.mark.parametrize("size", [(24, 24), (32, 32), (24, 32), (20, 12)])
def test_interpolated_positions_match_hf(size: tuple[int, int]) -> None:
    """HF's interpolate_pos_encoding=True vs tfam's per-call resampling at another image size.

    transformers 5.x (installed here: read modeling_vit.py, ViTEmbeddings.interpolate_pos_encoding)
    calls F.interpolate(size=(H // P, W // P), mode='bicubic', align_corners=False) on the
    square trained grid, with no +0.1 offset and no scale_factor: the same call as tfam's
    resample_pos_embed. Measured max |diff| on these sizes: 0.0 (tables and logits). HF
    supports this only for a square trained grid and an int patch size (it reshapes the table
    to sqrt(N) x sqrt(N) and divides by config.patch_size); tfam also resamples non-square grids.
    """
    torch.manual_seed(8)
    cfg = hf_config(image_size=16, patch_size=4)  # trained grid 4x4
    hf = randomize(transformers.ViTForImageClassification(cfg)).eval()
    model = from_hf(hf).eval()
    x = images(cfg, size=size)
    grid = (size[0] // 4, size[1] // 4)
    with torch.no_grad():
        embeddings = hf.vit.embeddings
        table_hf = embeddings.interpolate_pos_encoding(
            torch.zeros(1, 1 + grid[0] * grid[1], 32), *size
        )
        table_tfam = model.position_embedding(grid)
        logits_hf = hf(pixel_values=x, interpolate_pos_encoding=True).logits
        logits_tfam = model(x)
    assert table_tfam.shape == (1, 1 + grid[0] * grid[1], 32)
    assert max_diff(table_tfam, table_hf) < ATOL
    assert max_diff(logits_tfam, logits_hf) < ATOL
    # the table really was resampled (not the trained one reused)
    assert not torch.equal(table_tfam[:, 1:17], model.pos_embed[:, 1:])


def tfam_vit(**overrides: object) -> tfam.models.ViT:
    values = dict(
        image_size=(24, 16),
        patch_size=(8, 4),
        in_channels=3,
        num_classes=5,
        dim=32,
        depth=2,
        heads=4,
        ffn_dim=48,
    )
    values.update(overrides)
    return randomize(tfam.create_model("vit", **values)).eval()


@pytest.mark.parametrize(
    "overrides, hf_class, pooled",
    [
        ({}, "ViTForImageClassification", False),
        ({"fused_qkv": False, "attention": "math"}, "ViTForImageClassification", False),
        (
            {"qkv_bias": False, "activation": "gelu_tanh", "norm_eps": 1e-5},
            "ViTForImageClassification",
            False,
        ),
        ({"num_classes": 0}, "ViTModel", False),
        ({"num_classes": 0, "representation_size": 24}, "ViTModel", True),
    ],
)
def test_to_hf_round_trip(overrides: dict, hf_class: str, pooled: bool) -> None:
    """tfam -> HF -> tfam: the same weights bit for bit, and HF computes the same outputs."""
    torch.manual_seed(9)
    model = tfam_vit(**overrides)
    hf = to_hf(model)
    assert type(hf).__name__ == hf_class
    assert not hf.training
    base = hf.vit if hf_class == "ViTForImageClassification" else hf
    assert (base.pooler is not None) == pooled
    back = from_hf(hf, fused_qkv=model.config.fused_qkv, attention=model.config.attention)
    assert back.config == model.config
    state, state_back = model.state_dict(), back.state_dict()
    assert state.keys() == state_back.keys()
    for key in state:
        assert torch.equal(state[key], state_back[key]), key
    x = torch.randn(2, 3, 24, 16)
    with torch.no_grad():
        ours = model(x)
        assert torch.equal(back.eval()(x), ours)
        out = hf(pixel_values=x)
        hidden = base(pixel_values=x).last_hidden_state
        if hf_class == "ViTForImageClassification":
            theirs = out.logits
        else:
            theirs = out.pooler_output if pooled else hidden[:, 0]
        assert max_diff(ours, theirs) < ATOL
        assert max_diff(model.forward_features(x), hidden) < ATOL


def test_to_hf_labels_and_attention_implementation() -> None:
    model = tfam_vit(num_classes=3, attention="math")
    hf = to_hf(model, id2label={0: "cat", 1: "dog", 2: "owl"})
    assert hf.config.id2label == {0: "cat", 1: "dog", 2: "owl"}
    assert hf.config.label2id == {"cat": 0, "dog": 1, "owl": 2}
    assert hf.config._attn_implementation == "eager"  # tfam's math kernel
    assert to_hf(model, attn_implementation="sdpa").config._attn_implementation == "sdpa"
    with pytest.raises(ValueError, match="id2label has 2 labels; expected num_classes=3"):
        to_hf(model, id2label={0: "a", 1: "b"})


def test_to_hf_leaves_the_callers_rng_alone() -> None:
    model = tfam_vit()
    torch.manual_seed(12)
    expected = torch.rand(3)
    torch.manual_seed(12)
    to_hf(model)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"pool": "mean"}, r"pool='mean' cannot be converted"),
        ({"pool": "mean", "class_token": False}, r"class_token=False cannot be converted"),
        ({"position": "none"}, r"position='none' cannot be converted"),
        ({"norm": "rmsnorm"}, r"norm='rmsnorm' cannot be converted"),
        ({"norm_first": False}, r"norm_first=False cannot be converted"),
        ({"final_norm": False}, r"final_norm=False cannot be converted"),
        ({"activation": "swiglu"}, r"activation='swiglu' cannot be converted.*not gated"),
        ({"activation": "geglu"}, r"activation='geglu' cannot be converted"),
        ({"representation_size": 16}, r"representation_size=16 cannot be converted"),
    ],
)
def test_to_hf_refuses_what_hf_cannot_express(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        to_hf(tfam_vit(**overrides))


def test_to_hf_refuses_other_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KERNELS, "some_approximation", MathKernel)
    model = tfam_vit()
    model.set_attention("some_approximation")
    with pytest.raises(ValueError, match=r"attention='some_approximation'.*set_attention"):
        to_hf(model)
    with pytest.raises(ValueError, match=r"model=Linear \(family None\)"):
        to_hf(nn.Linear(2, 2))


def test_to_hf_warns_that_drop_path_is_dropped() -> None:
    model = tfam_vit(drop_path=0.1)
    with pytest.warns(UserWarning, match="drop_path=0.1 is dropped"):
        hf = to_hf(model)
    x = torch.randn(1, 3, 24, 16)
    with torch.no_grad():
        assert max_diff(model(x), hf(pixel_values=x).logits) < ATOL
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        to_hf(tfam_vit())  # no warning without drop_path


def test_missing_transformers_gives_an_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` now fails
    with pytest.raises(ImportError, match=r"pip install 'transformers"):
        to_hf(tfam_vit())


# transformers 4.x names, spelled out from its modeling_vit.py (ViTSelfAttention query/key/value
# under attention.attention, ViTSelfOutput dense, ViTIntermediate dense, ViTOutput dense).
def _legacy_name(key: str) -> str:
    key = re.sub(r"(^|\.)layers\.(\d+)\.", r"\1encoder.layer.\2.", key)
    for short, long in (("q", "query"), ("k", "key"), ("v", "value")):
        key = key.replace(f".attention.{short}_proj.", f".attention.attention.{long}.")
    key = key.replace(".attention.o_proj.", ".attention.output.dense.")
    key = key.replace(".mlp.fc1.", ".intermediate.dense.")
    return key.replace(".mlp.fc2.", ".output.dense.")


def test_legacy_transformers_names(tmp_path) -> None:
    """The 4.x -> 5.x renames agree with transformers' own loader: a checkpoint written with
    4.x names loads into the 5.x model with no missing or unexpected weight, and
    canonical_hf_key maps each 4.x name to the 5.x name transformers put it under."""
    from safetensors.torch import save_file

    torch.manual_seed(13)
    cfg = hf_config(attn_implementation="sdpa")
    hf = randomize(transformers.ViTForImageClassification(cfg))
    state = hf.state_dict()
    legacy = {_legacy_name(k): v.contiguous() for k, v in state.items()}
    assert "vit.encoder.layer.1.attention.attention.value.bias" in legacy
    assert "vit.encoder.layer.1.output.dense.weight" in legacy
    save_file(legacy, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    cfg.save_pretrained(tmp_path)
    loaded, info = transformers.ViTForImageClassification.from_pretrained(
        tmp_path, local_files_only=True, output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"]
    for new, old in zip(state, legacy):
        assert torch.equal(loaded.state_dict()[new], state[new])
        assert canonical_hf_key(old) == new
