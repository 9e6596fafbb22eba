"""The Vision Transformer: parameter counts, symmetry properties, gradients, attention maps,
position resampling, saving and loading, and input errors."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import tfam
from tfam.layers.position import sincos_2d_table
from tfam.models import AttentionWeights, ViT, count_parameters

TINY = dict(image_size=8, patch_size=4, in_channels=1, num_classes=3, dim=8, depth=2, heads=2)


def tiny(**overrides) -> ViT:
    return tfam.create_model("vit", **{**TINY, **overrides})


def images(gen: torch.Generator, b: int, c: int, h: int, w: int, dtype=torch.float32):
    return torch.randn(b, c, h, w, generator=gen, dtype=torch.float64).to(dtype)


def randomize_(model: torch.nn.Module, gen: torch.Generator, scale: float = 0.3):
    """Non-trivial values everywhere (biases, norms, tokens) so no term can hide at zero."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * scale)
    return model


def vit_param_formula(c) -> int:
    """Count from the architecture: patch projection, [CLS], positions, blocks, norm, head."""
    d, f, k = c.dim, c.ffn_dim, c.num_classes
    prefix = 1 if c.class_token else 0
    patch = c.patch_dim * d + d
    pos = (prefix + c.num_patches) * d if c.position == "learned" else 0
    attn = 3 * d * d + 3 * d + d * d + d  # W_Q, W_K, W_V (+ biases), W_O (+ bias)
    mlp = d * f + f + f * d + d
    block = attn + mlp + 2 * 2 * d  # two LayerNorms (gain + bias)
    final_norm = 2 * d if c.final_norm else 0
    head = d * k + k if k else 0
    return patch + prefix * d + pos + c.depth * block + final_norm + head


# ---------------------------------------------------------------------------------------------
# Parameter counts


@pytest.mark.parametrize(
    "name,expected",
    [
        ("vit_base_patch16_224", 86_567_656),
        ("vit_small_patch16_224", 22_050_664),
        ("vit_tiny_patch16_224", 5_717_416),
    ],
)
def test_preset_parameter_counts(name, expected):
    """The published counts of ViT-B/16, ViT-S/16 and ViT-Ti/16 with a 1000-class head."""
    assert count_parameters(name) == expected
    assert count_parameters(name, num_classes=1000) == expected
    with torch.device("meta"):
        model = tfam.create_model(name)
    assert model.num_parameters() == expected
    assert sum(p.numel() for p in model.parameters()) == expected
    assert vit_param_formula(model.config) == expected


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"class_token": False, "pool": "mean"},
        {"position": "none"},
        {"position": "sincos2d"},
        {"position": "sincos2d", "class_token": False, "pool": "mean"},
        {"num_classes": 0},
        {"image_size": (8, 12), "patch_size": (4, 2), "in_channels": 3},
    ],
)
def test_tiny_parameter_count_matches_formula(overrides):
    model = tiny(**overrides)
    assert model.num_parameters() == vit_param_formula(model.config)


# ---------------------------------------------------------------------------------------------
# Symmetry: without positions, self-attention is permutation-equivariant over tokens


def permute_patches(x: torch.Tensor, patch: tuple[int, int], perm: torch.Tensor) -> torch.Tensor:
    """Move the patches of images (B, C, H, W) so that new patch i is old patch perm[i]
    (row-major patch order)."""
    b, c, h, w = x.shape
    ph, pw = patch
    gh, gw = h // ph, w // pw
    p = x.reshape(b, c, gh, ph, gw, pw).permute(0, 2, 4, 1, 3, 5).reshape(b, gh * gw, c, ph, pw)
    p = p[:, perm]
    return p.reshape(b, gh, gw, c, ph, pw).permute(0, 3, 1, 4, 2, 5).reshape(b, c, h, w)


def no_position_model(gen: torch.Generator) -> ViT:
    model = tiny(position="none", class_token=False, pool="mean", depth=2).double().eval()
    return randomize_(model, gen)


@pytest.mark.parametrize("attention", ["sdpa", "math"])
def test_encoder_is_permutation_equivariant_without_positions(rng, attention):
    model = no_position_model(rng)
    model.set_attention(attention)
    x = images(rng, 2, 1, 8, 8, torch.float64)
    tokens = model.embed(x)  # (B, N, D): no [CLS], no position
    n = tokens.shape[1]
    perm = torch.randperm(n, generator=rng)
    assert not torch.equal(perm, torch.arange(n))

    def features(t):
        return model.norm(model.encoder(t)[0])

    out = features(tokens)
    torch.testing.assert_close(out, model.forward_features(x), rtol=0, atol=0)
    out_perm = features(tokens[:, perm])
    torch.testing.assert_close(out_perm, out[:, perm], rtol=1e-12, atol=1e-12)
    # Mean pooling forgets the order: the logits are invariant.
    torch.testing.assert_close(
        model.forward_head(out_perm), model.forward_head(out), rtol=1e-12, atol=1e-12
    )
    # The same holds end to end when the patches are moved inside the image.
    x_perm = permute_patches(x, model.config.patch_size, perm)
    torch.testing.assert_close(model.embed(x_perm), tokens[:, perm], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(model(x_perm), model(x), rtol=1e-12, atol=1e-12)


def test_learned_positions_break_equivariance(rng):
    model = randomize_(tiny(class_token=False, pool="mean").double().eval(), rng)
    x = images(rng, 2, 1, 8, 8, torch.float64)
    patches = model.patch_embed(x)  # (B, N, D) before positions
    perm = torch.tensor([3, 0, 2, 1])
    pos = model.pos_embed

    def features(t):
        return model.norm(model.encoder(t + pos)[0])

    gap = (features(patches[:, perm]) - features(patches)[:, perm]).abs().max().item()
    assert gap > 1e-2, f"position embeddings should make token order matter (gap {gap:.2e})"
    logit_gap = (model(permute_patches(x, (4, 4), perm)) - model(x)).abs().max().item()
    assert logit_gap > 1e-3


@pytest.mark.parametrize("class_token", [True, False])
def test_sincos2d_positions_are_fixed_and_go_to_patches_only(rng, class_token):
    """position='sincos2d': the fixed table is added to the patch tokens ([CLS] gets none),
    nothing is learned or saved, and another image size gets that grid's exact table."""
    pool = "cls" if class_token else "mean"
    model = randomize_(tiny(position="sincos2d", class_token=class_token, pool=pool), rng).eval()
    assert model.pos_embed is None
    names = {n for n, _ in model.named_parameters()} | set(model.state_dict())
    assert not any("pos" in n for n in names), names
    for size, grid in [((8, 8), (2, 2)), ((12, 16), (3, 4))]:
        x = images(rng, 2, 1, *size)
        patches = model.patch_embed(x) + sincos_2d_table(grid, 8)
        expected = (
            torch.cat([model.cls_token.expand(2, -1, -1), patches], 1) if class_token else patches
        )
        torch.testing.assert_close(model.embed(x), expected, rtol=0, atol=0)
    # Position makes token order matter.
    x = images(rng, 2, 1, 8, 8)
    perm = torch.tensor([3, 0, 2, 1])
    assert (model(permute_patches(x, (4, 4), perm)) - model(x)).abs().max() > 1e-3


def test_sincos2d_survives_save_load_and_dtype(rng, tmp_path):
    model = randomize_(tiny(position="sincos2d"), rng).eval()
    x = images(rng, 2, 1, 8, 8)
    model.save_pretrained(tmp_path)
    loaded = tfam.from_pretrained(tmp_path).eval()
    assert torch.equal(loaded(x), model(x))
    # The table follows the model's dtype like any buffer.
    assert model.double().position.table.dtype == torch.float64


def test_sincos2d_needs_dim_divisible_by_4():
    with pytest.raises(ValueError, match=r"dim=6 is invalid: position='sincos2d'.*divisible by 4"):
        tiny(position="sincos2d", dim=6, heads=2)


# ---------------------------------------------------------------------------------------------
# Gradients, attention maps, kernels


@pytest.mark.parametrize(
    "overrides",
    [
        {"pool": "cls"},
        {"pool": "mean"},
        {"pool": "mean", "class_token": False},
    ],
    ids=["cls", "mean+cls_token", "mean"],
)
def test_gradients_reach_every_parameter(rng, overrides):
    model = tiny(representation_size=6, **overrides).train()
    x = images(rng, 4, 1, 8, 8)
    labels = torch.tensor([0, 1, 2, 1])
    F.cross_entropy(model(x), labels).backward()
    names = [n for n, _ in model.named_parameters()]
    assert "pre_logits.0.weight" in names
    assert ("cls_token" in names) == model.config.class_token
    for name, p in model.named_parameters():
        assert p.grad is not None, f"{name} got no gradient"
        assert p.grad.abs().sum() > 0, f"{name} got an all-zero gradient"
        assert torch.isfinite(p.grad).all(), name


@pytest.mark.parametrize("attention", ["sdpa", "math"])
@pytest.mark.parametrize("class_token", [True, False])
def test_return_attention(rng, attention, class_token):
    pool = "cls" if class_token else "mean"
    model = tiny(depth=3, attention=attention, class_token=class_token, pool=pool).eval()
    randomize_(model, rng)
    x = images(rng, 2, 1, 8, 8)
    with torch.no_grad():
        logits = model(x)
        logits_w, attentions = model(x, return_attention=True)
    length = (1 if class_token else 0) + 4
    assert isinstance(attentions, AttentionWeights) and len(attentions) == 3
    for a in attentions:
        assert a.shape == (2, 2, length, length)
        torch.testing.assert_close(a.sum(-1), torch.ones(2, 2, length))
        assert (a >= 0).all()
    # Not bit-equal: return_attention runs every row of the last block, the plain forward only
    # [CLS]'s (and sdpa's fused path rounds differently); equal in float64, see below.
    torch.testing.assert_close(logits_w, logits, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "overrides",
    [{}, {"norm_first": False}, {"fused_qkv": False, "attention": "math"}],
    ids=["pre-norm", "post-norm", "separate-qkv-math"],
)
def test_cls_forward_equals_the_full_path_in_value_and_gradient(rng, overrides):
    """With pool='cls', forward() runs the last block for [CLS] only; logits and every
    gradient are those of forward_head(forward_features(x)), the full computation."""
    model = randomize_(tiny(depth=3, representation_size=6, **overrides).double(), rng).train()
    x = images(rng, 3, 1, 8, 8, torch.float64)
    labels = torch.tensor([0, 2, 1])
    shapes = []
    model.blocks[-1].register_forward_hook(lambda m, a, out: shapes.append(tuple(out[0].shape)))

    def loss_and_grads(fn):
        model.zero_grad()
        logits = fn(x)
        F.cross_entropy(logits, labels).backward()
        return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    fast, fast_grads = loss_and_grads(model)
    full, full_grads = loss_and_grads(lambda t: model.forward_head(model.forward_features(t)))
    assert shapes == [(3, 1, 8), (3, 5, 8)]  # forward() computed one row in the last block
    torch.testing.assert_close(fast, full, rtol=1e-12, atol=1e-12)
    for name, g in full_grads.items():
        torch.testing.assert_close(fast_grads[name], g, rtol=1e-10, atol=1e-12, msg=name)


def test_cls_forward_takes_the_full_path_while_dropout_is_active(rng):
    """Dropout masks are drawn over every token, as the reference implementations draw them."""
    model = tiny(depth=2, dropout=0.1).train()
    shapes = []
    model.blocks[-1].register_forward_hook(lambda m, a, out: shapes.append(tuple(out[0].shape)))
    x = images(rng, 2, 1, 8, 8)
    model(x)
    model.eval()(x)  # dropout off: the short path
    assert shapes == [(2, 5, 8), (2, 1, 8)]


def test_return_attention_is_exact_in_float64(rng):
    model = randomize_(tiny(depth=2, attention="sdpa").double().eval(), rng)
    x = images(rng, 2, 1, 8, 8, torch.float64)
    logits_w, _ = model(x, return_attention=True)
    torch.testing.assert_close(logits_w, model(x), rtol=1e-12, atol=1e-12)


def test_math_and_sdpa_models_give_the_same_logits(rng):
    sdpa = randomize_(tiny(depth=2, attention="sdpa").double().eval(), rng)
    math_model = tiny(depth=2, attention="math").double().eval()
    math_model.load_state_dict(sdpa.state_dict())
    x = images(rng, 3, 1, 8, 8, torch.float64)
    torch.testing.assert_close(math_model(x), sdpa(x), rtol=1e-12, atol=1e-12)
    # And in float32, at float32 tolerance.
    sdpa32, math32 = sdpa.float(), math_model.float()
    torch.testing.assert_close(math32(x.float()), sdpa32(x.float()), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Shapes: non-square images and patches, the seeds' toy setting, per-call resampling


def test_non_square_image_and_patches(rng):
    model = randomize_(
        tiny(image_size=(8, 12), patch_size=(4, 2), in_channels=2).double().eval(), rng
    )
    assert model.patch_embed.grid_size == (2, 6)
    assert model.pos_embed.shape == (1, 1 + 12, 8)
    x = images(rng, 2, 2, 8, 12, torch.float64)
    assert model(x).shape == (2, 3)
    assert model.forward_features(x).shape == (2, 13, 8)
    # Patch tokens are the flattened patches, row-major over the grid, times E (P_h P_w C, D).
    patches = x.unfold(2, 4, 4).unfold(3, 2, 2)  # (B, C, gh, gw, ph, pw)
    flat = patches.permute(0, 2, 3, 1, 4, 5).reshape(2, 12, 2 * 4 * 2)
    proj = model.patch_embed.proj
    expected = flat @ proj.weight.reshape(8, -1).T + proj.bias
    torch.testing.assert_close(model.patch_embed(x), expected, rtol=1e-12, atol=1e-12)


def test_seed_toy_setting_builds_and_runs(rng):
    """The seed's worked example: an 8x12 one-channel image in 4x4 patches -> 6 patches of
    length 16; D = 10 with 2 heads -> head width 5."""
    model = tfam.create_model(
        "vit", image_size=(8, 12), patch_size=4, in_channels=1, dim=10, heads=2, depth=1,
        num_classes=4,
    )  # fmt: skip
    c = model.config
    assert c.grid_size == (2, 3) and c.num_patches == 6 and c.patch_dim == 16
    assert c.head_dim == 5 and model.blocks[0].mhsa.head_dim == 5
    x = images(rng, 2, 1, 8, 12)
    logits, attentions = model(x, return_attention=True)
    assert logits.shape == (2, 4)
    assert attentions[0].shape == (2, 2, 7, 7)
    assert model.forward_features(x).shape == (2, 7, 10)


def test_per_call_position_resampling_equals_loading_at_the_new_size(rng, tmp_path):
    model = randomize_(tiny(image_size=8, patch_size=2).eval(), rng)
    pos_before = model.pos_embed.detach().clone()
    x16 = images(rng, 2, 1, 16, 16)
    with torch.no_grad():
        out = model(x16)
    assert out.shape == (2, 3)
    assert torch.equal(model.pos_embed, pos_before), "a forward must not change the table"

    model.save_pretrained(tmp_path)
    big = tfam.from_pretrained(tmp_path, image_size=16)
    assert big.config.image_size == (16, 16)
    assert big.pos_embed.shape == (1, 1 + 64, 8)
    assert torch.equal(big.pos_embed[:, :1], model.pos_embed[:, :1]), "[CLS] row kept"
    with torch.no_grad():
        torch.testing.assert_close(big(x16), out, rtol=0, atol=0)
        # And the resized model runs the original 8x8 size by resampling its table back.
        assert big(images(rng, 2, 1, 8, 8)).shape == (2, 3)


def test_num_classes_zero_returns_pooled_features(rng):
    model = tiny(num_classes=0).eval()
    x = images(rng, 2, 1, 8, 8)
    out = model(x)
    assert out.shape == (2, 8)
    torch.testing.assert_close(out, model.forward_features(x)[:, 0])


def test_mean_pool_skips_the_class_token(rng):
    model = randomize_(tiny(pool="mean").eval(), rng)
    x = images(rng, 2, 1, 8, 8)
    tokens = model.forward_features(x)
    expected = model.head(tokens[:, 1:].mean(1))
    torch.testing.assert_close(model(x), expected)


# ---------------------------------------------------------------------------------------------
# Saving and loading


@pytest.mark.parametrize(
    "overrides", [{}, {"class_token": False, "pool": "mean", "fused_qkv": False}]
)
def test_save_and_load_round_trip(rng, tmp_path, overrides):
    model = randomize_(tiny(image_size=(8, 12), representation_size=5, **overrides), rng).eval()
    model.save_pretrained(tmp_path)
    assert (tmp_path / "config.json").is_file() and (tmp_path / "model.safetensors").is_file()
    loaded = tfam.from_pretrained(tmp_path)
    assert type(loaded) is ViT
    assert loaded.config == model.config
    assert not loaded.training
    state, loaded_state = model.state_dict(), loaded.state_dict()
    assert state.keys() == loaded_state.keys()
    for k in state:
        assert torch.equal(state[k], loaded_state[k]), k
    x = images(rng, 2, 1, 8, 12)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


def test_from_pretrained_can_switch_kernel(rng, tmp_path):
    model = randomize_(tiny(attention="sdpa"), rng).eval()
    model.save_pretrained(tmp_path)
    loaded = tfam.from_pretrained(tmp_path, attention="math")
    assert loaded.config.attention == "math" and loaded.blocks[0].mhsa.attention == "math"
    x = images(rng, 2, 1, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x), rtol=1e-5, atol=1e-6)


def test_from_pretrained_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        tfam.from_pretrained(tmp_path)


# ---------------------------------------------------------------------------------------------
# Input errors at forward time name the shapes


@pytest.mark.parametrize(
    "shape,expected",
    [
        ((2, 3, 8, 8), ["(2, 3, 8, 8)", "in_channels=1"]),  # wrong channel count
        ((1, 8, 8), ["(1, 8, 8)", "(B, C, H, W)"]),  # wrong ndim
        ((2, 1, 2, 8, 8), ["(2, 1, 2, 8, 8)"]),  # wrong ndim
        ((2, 1, 9, 8), ["9", "4x4"]),  # not divisible by the patch
        ((2, 1, 8, 10), ["10", "4x4"]),
    ],
)
def test_bad_input_raises_value_error_with_shapes(shape, expected):
    model = tiny()
    with pytest.raises(ValueError) as info:
        model(torch.zeros(shape))
    message = str(info.value)
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"
    if len(shape) == 4 and shape[1] == 1:  # the spatial size is named, as HxW or as the shape
        assert re.search(rf"{shape[2]}\s*x\s*{shape[3]}|{re.escape(str(shape))}", message)
