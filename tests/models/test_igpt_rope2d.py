"""iGPT's 2-D RoPE over the pixel grid (``image_size`` with ``position='rope'``)."""

from __future__ import annotations

import pytest
import torch

import tfam
from tfam.layers.position import TokenPositions
from tfam.models.igpt import IGPTConfig, complete


def tiny(**values) -> tfam.models.igpt.IGPT:
    torch.manual_seed(0)
    base = dict(dim=32, heads=2, depth=2, vocab_size=9, max_positions=17, position="rope")
    return tfam.create_model("igpt_digits", **{**base, **values}).eval()


def test_grid_positions_count_from_the_offset() -> None:
    # Start token at (0, 0); pixel i at divmod(i, W); a slice of the whole raster from offset.
    whole = TokenPositions(0, 13, grid=(3, 4), prefix=1).query(torch.device("cpu"))
    expected = [[0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2], [0, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]]
    assert whole.tolist() == expected
    for offset in range(13):
        part = TokenPositions(offset, 13 - offset, grid=(3, 4), prefix=1).query(torch.device("cpu"))
        assert torch.equal(part, whole[:, offset:])


def test_vit_grid_positions_are_unchanged() -> None:
    got = TokenPositions.on_grid((2, 3), prefix=1).query(torch.device("cpu"))
    assert got.tolist() == [[0, 0, 0, 0, 1, 1, 1], [0, 0, 1, 2, 0, 1, 2]]


def test_2d_rope_differs_from_1d_and_cached_decoding_matches_the_full_forward() -> None:
    flat, grid = tiny(), tiny(image_size=4)
    grid.load_state_dict(flat.state_dict())  # the same weights: RoPE learns nothing
    ids = torch.randint(0, 8, (2, 17))
    ids[:, 0] = 8
    full = grid(ids)
    assert not torch.allclose(full, flat(ids), atol=1e-4)
    # A prompt, then one pixel at a time through the KV cache (each new token's cell counted
    # from the cache's offset): the full forward's hidden states, to float64 rounding.
    grid = grid.double()
    whole, _ = grid._hidden(ids, None)
    cache = grid.stack.make_cache(17)
    steps = [grid._hidden(ids[:, :9], None, cache=cache)[0]]
    steps += [grid._hidden(ids[:, t : t + 1], None, cache=cache)[0] for t in range(9, 17)]
    torch.testing.assert_close(torch.cat(steps, dim=1), whole, rtol=1e-12, atol=1e-12)
    # And generate, through the same cache, picks the full forward's argmax at every step.
    out = grid.generate(ids[:, :9], max_new_tokens=8, do_sample=False)
    assert torch.equal(out[:, 9:], grid(out[:, :-1])[:, 8:].argmax(-1))


def test_2d_rope_scores_see_the_pixel_above_at_one_offset() -> None:
    # Queries and keys identical at every pixel: q_(r,c) . k_(r-1,c) is the same for all
    # (r, c) under 2-D RoPE; under 1-D RoPE the raster offset is W as well, so compare the
    # left neighbour across a row's end, which 2-D RoPE keeps apart from a true neighbour.
    model = tiny(image_size=4)
    rope = model.stack.blocks[0].mhsa.qk_transform
    q = torch.randn(1, 1, 1, 16).expand(1, 1, 17, 16)
    pos = TokenPositions(0, 17, grid=(4, 4), prefix=1).query(torch.device("cpu"))
    rq, rk = rope(q, q, pos, pos)
    scores = (rq @ rk.transpose(-1, -2))[0, 0]
    above = [scores[1 + 4 * r + c, 1 + 4 * (r - 1) + c] for r in range(1, 4) for c in range(4)]
    assert torch.allclose(torch.stack(above), above[0].expand(12), atol=1e-5)
    left = scores[1 + 4 + 1, 1 + 4]  # (1, 1) -> (1, 0)
    wrapped = scores[1 + 4, 1 + 3]  # (1, 0) -> (0, 3): one raster step, not a neighbour
    assert not torch.allclose(left, wrapped, atol=1e-3)


def test_complete_runs_with_2d_rope() -> None:
    model = tiny(image_size=4)
    prompt = torch.full((3, 9), 2)
    prompt[:, 0] = 8
    out = complete(model, prompt, 16, samples=2, generator=torch.Generator().manual_seed(0))
    assert out.shape == (3, 2, 16) and torch.equal(
        out[:, :, :8], prompt[:, None, 1:].expand(3, 2, 8)
    )


@pytest.mark.parametrize(
    ("values", "field"),
    [
        (dict(image_size=4, heads=16), "heads"),  # head width 2: not a multiple of 4
        (dict(image_size=3), "max_positions"),  # 1 + 9 < 17
        (dict(image_size=(4, 0)), "image_size"),
    ],
)
def test_image_size_errors_name_the_field(values, field) -> None:
    base = dict(dim=32, heads=2, depth=2, vocab_size=9, max_positions=17, position="rope")
    with pytest.raises(ValueError, match=field):
        IGPTConfig(**{**base, **values})


def test_other_schemes_ignore_image_size() -> None:
    # image_size says the grid; only RoPE reads it (a learned table stays 1-D, HF's layout).
    plain, sized = tiny(position="learned"), tiny(position="learned", image_size=4)
    assert sized.config.rope_grid is None and plain.config.rope_grid is None
    sized.load_state_dict(plain.state_dict())
    ids = torch.randint(0, 8, (1, 17))
    assert torch.equal(sized(ids), plain(ids))
    assert tiny(image_size=4).config.rope_grid == (4, 4)


def test_padding_is_refused_with_2d_rope() -> None:
    model = tiny(image_size=4)
    ids = torch.randint(0, 8, (2, 5))
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[0, 0] = False
    with pytest.raises(ValueError, match="attention_mask"):
        model(ids, attention_mask=mask)


def test_image_size_survives_save_and_load(tmp_path) -> None:
    model = tiny(image_size=(4, 4))
    model.save_pretrained(tmp_path)
    again = tfam.from_pretrained(tmp_path).eval()
    assert again.config.image_size == (4, 4)
    ids = torch.randint(0, 8, (1, 17))
    ids[:, 0] = 8
    assert torch.allclose(again(ids), model(ids))
