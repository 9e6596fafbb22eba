"""Swin against written-out definitions and Hugging Face: the shifted-window mask by brute
force, the relative position index, sizes that pad, HF's window rule, save/load; what the
family and preset contracts do not check."""

from __future__ import annotations

import itertools

import pytest
import torch

import tfam
from tfam.layers import RelativePositionBias, WindowPartition
from tfam.models import Swin, create_config


def tiny(**overrides: object) -> Swin:
    torch.manual_seed(0)
    values = dict(image_size=32, patch_size=2, in_channels=3, num_classes=5, dim=16, heads=2,
                  depths=(2, 2, 2), window=4)  # fmt: skip
    model = tfam.create_model("swin", **{**values, **overrides})
    assert isinstance(model, Swin)
    return model


def brute_force_mask(grid: tuple[int, int], ws: int, shift: int) -> torch.Tensor:
    """(nW, Ws^2, Ws^2) from window ids alone: roll the padded map by -shift, label each token
    by its window and by whether the roll wrapped it around (per axis: it came from the other
    edge); two tokens may attend when they share the window and both wrap labels."""
    hp, wp = (-(-g // ws) * ws for g in grid)
    labels = {}
    for r, c in itertools.product(range(hp), range(wp)):  # (r, c) on the rolled map
        r0, c0 = (r + shift) % hp, (c + shift) % wp  # where the roll took it from
        window = (r // ws) * (wp // ws) + c // ws
        labels[r, c] = (window, r0 != r + shift, c0 != c + shift)
    nw = (hp // ws) * (wp // ws)
    mask = torch.zeros(nw, ws * ws, ws * ws, dtype=torch.bool)
    places = {}
    for (r, c), (window, _, _) in labels.items():
        places.setdefault(window, []).append((r, c))
    for window, cells in places.items():
        for (i, a), (j, b) in itertools.product(enumerate(cells), repeat=2):
            mask[window, i, j] = labels[a] == labels[b]
    return mask


@pytest.mark.parametrize(
    "grid, ws, shift", [((8, 8), 4, 2), ((14, 14), 7, 3), ((12, 8), 4, 1), ((9, 11), 3, 1)]
)
def test_shifted_window_mask_is_the_brute_force_one(grid, ws, shift):
    part = WindowPartition(ws, shift)
    assert torch.equal(part.region_mask(grid), brute_force_mask(grid, ws, shift))


def test_shifted_window_mask_is_hugging_faces():
    """HF marks the pairs to hide with -100 (get_attn_mask); tfam's bool mask is the same
    set of pairs."""
    pytest.importorskip("transformers")
    from transformers import SwinConfig
    from transformers.models.swin.modeling_swin import SwinLayer

    for grid, ws in (((8, 8), 4), ((14, 21), 7), ((12, 9), 3)):
        layer = SwinLayer(SwinConfig(window_size=ws, embed_dim=8), 8, grid, 2, shift_size=ws // 2)
        hp, wp = (-(-g // ws) * ws for g in grid)
        theirs = layer.get_attn_mask(hp, wp, torch.float32, torch.device("cpu"))
        ours = WindowPartition(ws, ws // 2).region_mask(grid)
        assert torch.equal(ours, theirs == 0)


def test_relative_position_index_is_hugging_faces():
    pytest.importorskip("transformers")
    from transformers.models.swin.modeling_swin import SwinRelativePositionBias

    for ws in (2, 4, 7):
        theirs = SwinRelativePositionBias(3, (ws, ws))
        ours = RelativePositionBias(3, ws)
        pos = torch.arange(ws * ws)
        expected = theirs._create_relative_position_index()
        assert torch.equal(ours.index(pos, pos), expected)
        with torch.no_grad():
            ours.table.copy_(torch.randn(ours.table.shape))
            theirs.relative_position_bias_table.copy_(ours.table)
        torch.testing.assert_close(ours(pos, pos), theirs()[0], rtol=0, atol=0)


def test_masked_pairs_weigh_exactly_zero_even_with_large_scores():
    """The decision against HF's -100: tfam's mask is -inf, so a hidden pair gets no weight
    however large the scores are (HF's -100 leaks once scores spread over ~100)."""
    model = tiny(depths=(2,)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(30.0)  # scores of thousands
        _, weights = model(torch.randn(1, 3, 32, 32), return_attention=True)
    shifted = weights[1]  # block 1.2: shifted windows on the 16 x 16 grid
    hidden = ~WindowPartition(4, 2).region_mask((16, 16))
    assert hidden.any() and torch.isfinite(shifted).all()
    assert (shifted.transpose(0, 1)[:, hidden] == 0).all()


@pytest.mark.filterwarnings("ignore:drop_path")
@pytest.mark.parametrize(
    "image_size, window, grids",
    [
        (36, 4, [(18, 18), (9, 9), (5, 5)]),  # pads 18 -> 20, 9 -> 12, 5 -> 8; odd merges
        ((28, 20), 3, [(14, 10), (7, 5), (4, 3)]),  # non-square; last stage: window 3 = side
    ],
)
def test_a_size_that_pads_runs_and_matches_hugging_face(image_size, window, grids):
    pytest.importorskip("transformers")
    from tfam.interop.hf_swin import swin_to_hf

    model = tiny(image_size=image_size, window=window, attention="math").eval()
    assert model.config.stage_grids() == grids
    with torch.no_grad():
        for p in model.parameters():  # not the near-identity init: every part matters
            p.add_(torch.randn(p.shape) * 0.2)
        hf = swin_to_hf(model).eval()
        x = torch.randn(2, 3, *model.config.image_size)
        expected = hf(pixel_values=x).logits
        torch.testing.assert_close(model(x), expected, rtol=1e-5, atol=1e-5)


def test_a_grid_no_larger_than_the_window_uses_it_whole_without_shift():
    """Hugging Face's rule (set_shift_and_window_size): window = min(grid), no shift; tfam
    decides it when the model is built, so the table is that window's."""
    model = tiny(image_size=24, window=4, depths=(2, 2, 2))  # grids 12, 6, 3
    parts = [b.token_partition for b in model.encoder.blocks]
    assert [(p.window, p.shift) for p in parts] == [(4, 0), (4, 2), (4, 0), (4, 2), (3, 0), (3, 1)]
    assert parts[-1].shift_for((3, 3)) == 0  # one window spans the grid: no shift
    tables = [b.mhsa.bias_provider.table.shape for b in model.encoder.blocks]
    assert tables == [(49, 2)] * 2 + [(49, 4)] * 2 + [(25, 8)] * 2
    _, weights = model(torch.randn(2, 3, 24, 24), return_attention=True)
    assert [tuple(w.shape) for w in weights] == (
        [(18, 2, 16, 16)] * 2 + [(8, 4, 16, 16)] * 2 + [(2, 8, 9, 9)] * 2
    )


def test_config_depth_caps_the_stages_and_round_trips():
    config = create_config("swin_tiny_patch4_window7_224")
    assert config.depths == (2, 2, 6, 2) and config.depth == 6
    capped = create_config("swin_tiny_patch4_window7_224", depth=2)
    assert capped.depths == (2, 2, 2, 2) and capped.depth == 2
    again = type(config).from_json(capped.to_json())
    assert again == capped
    with pytest.raises(ValueError, match=r"depths=\[2, 0\] is invalid"):
        create_config("swin", depths=[2, 0])
    with pytest.raises(ValueError, match="patch_size=5 is invalid"):
        create_config("swin", image_size=28, patch_size=5)


def test_save_load_gives_equal_outputs(tmp_path):
    model = tiny(position="learned", drop_path=0.1)
    model.train()
    model(*model.example_inputs(2)).square().mean().backward()
    assert all(p.grad is not None for p in model.parameters())
    model.eval()
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        expected = model(x)
    model.save_pretrained(tmp_path / "swin")
    loaded = tfam.from_pretrained(tmp_path / "swin")
    assert type(loaded) is Swin and loaded.config == model.config
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), expected, rtol=0, atol=0)
    # A learned absolute table is resampled for another image size.
    bigger = tfam.from_pretrained(tmp_path / "swin", image_size=40)
    assert bigger.pos_embed.shape == (1, 400, 16)


def test_relative_tables_and_positions_are_not_decayed():
    from tfam.training.optim import split_decay

    _, no_decay = split_decay(tiny(position="learned"))
    assert "pos_embed" in no_decay
    assert "encoder.stages.0.blocks.0.mhsa.bias_provider.table" in no_decay
