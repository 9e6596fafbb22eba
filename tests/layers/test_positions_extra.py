"""The schemes of layers/positions_extra.py beyond what the family contract checks.

relative: T5's bucket function and bias equal Hugging Face's T5Attention (float64), buckets by
hand at a few distances, a function of j - i only, causal from the stack, past max_distance.
generated: the grid's convolution equals a depth-wise 3x3 written out, the GRU never reads a
later token, a left-padded row equals the row alone, no length bound, no cached continuation.
Both: explain counts their parameters; GPT's and the encoder–decoder's generate give the same
tokens with and without the cache.
"""

from __future__ import annotations

import pytest
import torch

import tfam
from tfam.config import BaseConfig
from tfam.layers import (
    GeneratedPosition,
    T5RelativeBias,
    TokenPositions,
    TransformerStack,
    build_position,
    relative_position_bucket,
)

pytestmark = pytest.mark.usefixtures("one_thread")


# ---------------------------------------------------------------------------------------------
# relative: T5's bucketed bias


def hf_t5_attention(heads: int, buckets: int, distance: int, decoder: bool):
    """A tiny Hugging Face T5Attention with a relative bias table (random weights, offline)."""
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    from transformers import T5Config

    config = T5Config(
        d_model=8,
        d_kv=4,
        num_heads=heads,
        relative_attention_num_buckets=buckets,
        relative_attention_max_distance=distance,
        is_decoder=decoder,
    )
    return t5.T5Attention(config, has_relative_attention_bias=True).double().eval()


@pytest.mark.parametrize("buckets,distance", [(32, 128), (16, 40), (8, 20)])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_bucket_equals_hugging_face_t5(buckets, distance, bidirectional):
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    relative = torch.arange(-3 * distance, 3 * distance + 1)
    ours = relative_position_bucket(relative, bidirectional, buckets, distance)
    ref = t5.T5Attention._relative_position_bucket(relative, bidirectional, buckets, distance)
    assert torch.equal(ours, ref)
    assert int(ours.min()) >= 0 and int(ours.max()) == buckets - 1


@pytest.mark.parametrize("decoder", [False, True])
@pytest.mark.parametrize(
    "lq,lk,past,buckets,distance",
    [
        (7, 7, 0, 32, 128),
        (150, 150, 0, 32, 128),
        (1, 140, 139, 32, 128),
        (3, 200, 197, 32, 128),
        (50, 50, 0, 16, 40),
        (2, 60, 58, 8, 20),
    ],
)
def test_bias_equals_hugging_face_t5_compute_bias(decoder, lq, lk, past, buckets, distance):
    """The table copied from T5's ``relative_attention_bias``: every (head, query, key) entry
    equal in float64, full-length and cached (queries after ``past`` keys), past max_distance."""
    hf = hf_t5_attention(heads=3, buckets=buckets, distance=distance, decoder=decoder)
    ours = T5RelativeBias(3, buckets, distance, bidirectional=not decoder).double()
    with torch.no_grad():
        ours.weight.copy_(hf.relative_attention_bias.weight)
    with torch.no_grad():
        ref = hf.compute_bias(lq, lk, past_seen_tokens=past)[0]  # (H, Lq, Lk)
        got = ours(torch.arange(past, past + lq), torch.arange(lk))
    assert got.shape == (3, lq, lk) and got.dtype == torch.float64
    torch.testing.assert_close(got, ref, rtol=0, atol=0)


def test_buckets_by_hand():
    """Bidirectional (16 buckets a direction, 8 exact): d = i - j for the past, +16 for j > i;
    causal (all 32 for the past, 16 exact): n/2 + floor(log(d / (n/2)) / log(128 / (n/2)) * n/2)
    worked out for distances away from a bucket edge."""
    past = {0: 0, 1: 1, 7: 7, 8: 8, 11: 8, 12: 9, 20: 10, 45: 12, 100: 15, 127: 15, 128: 15}
    for d, bucket in past.items():
        assert int(relative_position_bucket(torch.tensor(-d))) == bucket, d
    for d, bucket in {1: 17, 7: 23, 20: 26, 500: 31}.items():
        assert int(relative_position_bucket(torch.tensor(d))) == bucket, d
    causal = {0: 0, 15: 15, 16: 16, 20: 17, 40: 23, 100: 30, 127: 31, 128: 31, 10**6: 31}
    for d, bucket in causal.items():
        assert int(relative_position_bucket(torch.tensor(-d), bidirectional=False)) == bucket, d
    # The future is one bucket (0) in a causal stack: its keys are masked anyway.
    assert int(relative_position_bucket(torch.tensor(5), bidirectional=False)) == 0


@pytest.mark.parametrize("bidirectional", [True, False])
def test_bias_is_a_function_of_j_minus_i(rng, bidirectional):
    bias = T5RelativeBias(2, bidirectional=bidirectional)
    with torch.no_grad():
        bias.weight.copy_(torch.randn(32, 2, generator=rng))
        base = bias(torch.arange(5, 25), torch.arange(0, 30))
        for shift in (1, 17, 300):
            shifted = bias(torch.arange(5 + shift, 25 + shift), torch.arange(shift, 30 + shift))
            assert torch.equal(shifted, base), shift
    # Constant along every diagonal: bias[:, i, j] == bias[:, i + 1, j + 1].
    assert torch.equal(base[:, 1:, 1:], base[:, :-1, :-1])
    # Bidirectional: the future has buckets of its own; causal: it shares bucket 0.
    assert torch.equal(base[:, 0, 6], base[:, 0, 5]) != bidirectional  # j - i = +1 vs 0


def test_max_distance_must_pass_the_exact_buckets():
    with pytest.raises(ValueError, match=r"^max_distance=16 is invalid with num_buckets=32"):
        T5RelativeBias(2, 32, 16)


def test_the_stack_says_whether_it_is_causal():
    config = BaseConfig(dim=8, heads=2, depth=2, position="relative")
    assert TransformerStack(config).bias_provider.bidirectional is True
    assert TransformerStack(config, causal=True).bias_provider.bidirectional is False
    assert TransformerStack(config, kind="decoder").bias_provider.bidirectional is False
    gpt = tfam.create_model("gpt", dim=8, heads=2, depth=2, vocab_size=11, position="relative")
    assert gpt.stack.bias_provider.bidirectional is False
    assert "stack.bias_provider.weight" in gpt.state_dict()
    from tfam.training.optim import split_decay

    assert "stack.bias_provider.weight" in split_decay(gpt)[1]  # no weight decay, as pos_embed
    # One table for the stack, shared by its blocks: H x num_buckets parameters in all.
    assert (
        gpt.num_parameters()
        == tfam.create_model(
            "gpt", dim=8, heads=2, depth=2, vocab_size=11, position="none"
        ).num_parameters()
        + 2 * 32
    )


@pytest.mark.parametrize("causal", [False, True])
def test_relative_stack_cache_and_lengths_past_max_distance(rng, causal):
    """A cached stack continues the distances (the bias of new queries after cached keys); a
    stack runs at any length (here 160 > max_distance = 128)."""
    config = BaseConfig(dim=12, heads=3, depth=2, position="relative", attention="math")
    stack = TransformerStack(config, causal=causal).double().eval()
    x = torch.randn(2, 160, 12, generator=rng, dtype=torch.float64)
    with torch.no_grad():
        full, _ = stack(x)
        assert torch.isfinite(full).all()
        if causal:
            cache = stack.make_cache(160)
            outs = [stack(x[:, :150], cache=cache)[0]]
            outs += [stack(x[:, t : t + 1], cache=cache)[0] for t in range(150, 160)]
            torch.testing.assert_close(torch.cat(outs, dim=1), full, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# generated: a depth-wise convolution on a grid, a GRU on a sequence


def grid_scheme(dim: int = 6, grid=(3, 4), prefix: int = 1) -> GeneratedPosition:
    config = BaseConfig(dim=dim, heads=2, position="generated")
    scheme = build_position(config, grid=grid, prefix=prefix).double()
    assert isinstance(scheme, GeneratedPosition) and scheme.gru is None
    return scheme


@pytest.mark.parametrize("grid", [(3, 4), (5, 2), (1, 1)])
def test_grid_convolution_equals_a_depthwise_3x3_by_hand(rng, grid):
    """PEG(X) = X + DWConv3x3(X) on the patch grid (zero padding), for the grid it was built
    for and others; the prefix token is left as it was."""
    scheme = grid_scheme()
    with torch.no_grad():
        scheme.conv.weight.copy_(torch.randn(6, 1, 3, 3, generator=rng, dtype=torch.float64))
        scheme.conv.bias.copy_(torch.randn(6, generator=rng, dtype=torch.float64))
    gh, gw = grid
    x = torch.randn(2, 1 + gh * gw, 6, generator=rng, dtype=torch.float64)
    with torch.no_grad():
        out = scheme.add(x, grid)
    w, b = scheme.conv.weight.detach(), scheme.conv.bias.detach()
    patches = x[:, 1:].reshape(2, gh, gw, 6)
    expected = x.clone()
    for i in range(gh):
        for j in range(gw):
            value = b.clone().expand(2, 6).clone()
            for a in (-1, 0, 1):
                for c in (-1, 0, 1):
                    if 0 <= i + a < gh and 0 <= j + c < gw:
                        value += w[:, 0, a + 1, c + 1] * patches[:, i + a, j + c]
            expected[:, 1 + i * gw + j] += value
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    assert torch.equal(out[:, 0], x[:, 0])


def sequence_scheme(dim: int = 8, length: int = 6) -> GeneratedPosition:
    config = BaseConfig(dim=dim, heads=2, position="generated")
    scheme = build_position(config, length=length).double().eval()
    assert isinstance(scheme, GeneratedPosition) and scheme.conv is None
    return scheme


def values(scheme: GeneratedPosition, x: torch.Tensor, where: TokenPositions) -> torch.Tensor:
    with torch.no_grad():
        return scheme.add(x, where) - x


def test_gru_is_causal_and_has_no_length_bound(rng):
    """Changing token t leaves every value before t unchanged and changes t's; a scheme built
    for 6 positions runs over 40."""
    scheme = sequence_scheme(length=6)
    x = torch.randn(2, 40, 8, generator=rng, dtype=torch.float64)
    base = values(scheme, x, TokenPositions(0, 40))
    assert base.shape == (2, 40, 8) and torch.isfinite(base).all()
    for t in (1, 17, 39):
        changed = x.clone()
        changed[:, t] += 1.0
        after = values(scheme, changed, TokenPositions(0, 40))
        assert torch.equal(after[:, :t], base[:, :t]), t
        assert not torch.allclose(after[:, t], base[:, t]), t


def test_gru_runs_a_left_padded_row_from_its_first_real_token(rng):
    scheme = sequence_scheme()
    x = torch.randn(3, 7, 8, generator=rng, dtype=torch.float64)
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1], [1] * 7, [0, 0, 0, 0, 0, 0, 1]], dtype=torch.bool)
    got = values(scheme, x, TokenPositions.count(7, key_mask=mask))
    for row in range(3):
        start = int((~mask[row]).sum())
        alone = values(scheme, x[row : row + 1, start:], TokenPositions(0, 7 - start))
        torch.testing.assert_close(got[row : row + 1, start:], alone, rtol=1e-12, atol=1e-12)
        assert torch.equal(got[row, :start], torch.zeros(start, 8, dtype=torch.float64))


def test_gru_refuses_to_continue_a_cache_and_each_network_its_other_domain(rng):
    scheme = sequence_scheme()
    x = torch.randn(1, 1, 8, generator=rng, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"^position='generated' cannot continue after 3 cached"):
        scheme.add(x, TokenPositions(3, 1))
    with pytest.raises(ValueError, match="a patch grid needs the scheme built with grid="):
        scheme.add(torch.randn(1, 5, 8, dtype=torch.float64), (2, 2))
    with pytest.raises(ValueError, match="a sequence needs the scheme built with length="):
        grid_scheme().add(torch.randn(1, 3, 6, dtype=torch.float64), TokenPositions(0, 3))
    # A stack builds the scheme with neither: no network, nothing drawn from the RNG.
    bare = build_position(BaseConfig(dim=8, heads=2, position="generated"))
    assert list(bare.parameters()) == []


def test_generated_parameters_are_the_familys_and_saved(tmp_path):
    gpt = tfam.create_model("gpt", dim=8, heads=2, depth=1, vocab_size=11, position="generated")
    assert not gpt.decodes_from_cache()
    names = set(gpt.state_dict())
    assert {"position.gru.weight_ih_l0", "position.proj.weight"} <= names
    assert gpt.pos_embed is None
    vit = tfam.create_model(
        "vit", image_size=8, patch_size=2, dim=8, heads=2, depth=1, position="generated"
    )
    assert {"position.conv.weight", "position.conv.bias"} <= set(vit.state_dict())
    plain = tfam.create_model("gpt", dim=8, heads=2, depth=1, vocab_size=11, position="relative")
    assert plain.decodes_from_cache()


# ---------------------------------------------------------------------------------------------
# both: explain's totals, generation with and without the cache


@pytest.mark.parametrize(
    "name,position",
    [("gpt", "relative"), ("gpt", "generated"), ("vit", "generated"), ("transformer", "generated")],
)
def test_explain_counts_every_parameter(name, position):
    """On the meta device at the full preset size (explain checks its total against the built
    model's count; a short sequence, which the count does not depend on, keeps the meta GRU
    quick) and on a small real model."""
    table = tfam.explain(name, position=position, **({} if name == "vit" else {"seq_len": 8}))
    with torch.device("meta"):
        meta = tfam.create_model(name, position=position)
    assert table.total_params == meta.num_parameters()
    small = dict(dim=16, heads=2, depth=1)
    if name != "vit":
        small.update(vocab_size=20, max_positions=16)
    model = tfam.create_model(name, position=position, **small)
    assert tfam.explain(model).total_params == model.num_parameters()
    steps = {row.step for row in table.rows}
    assert ("position bias" in steps) == (position == "relative")


@pytest.mark.parametrize("position", ["relative", "generated"])
@pytest.mark.parametrize("num_beams", [1, 3])
def test_transformer_generates_the_same_with_and_without_the_cache(position, num_beams):
    if position not in tfam.models.TransformerConfig.position_names():
        pytest.skip(f"the encoder–decoder does not take position={position!r} here")
    torch.manual_seed(0)
    model = tfam.create_model(
        "transformer", dim=16, heads=2, depth=2, vocab_size=20, max_positions=16, position=position
    ).eval()
    src = torch.randint(4, 20, (2, 6))
    kwargs = dict(max_new_tokens=8, num_beams=num_beams, eos_token_id=[])
    cached = model.generate(src, use_cache=True, **kwargs)
    assert torch.equal(cached, model.generate(src, use_cache=False, **kwargs))
