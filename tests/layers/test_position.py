"""Position encodings: the sinusoidal tables (1-D and 2-D) and resampling of a learned 2-D table."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tfam.layers.position import resample_pos_embed, sincos_2d_table, sinusoidal_table


@pytest.mark.parametrize("dim", [1, 2, 7, 8, 33])
def test_sinusoidal_table_matches_formula(dim):
    """PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(pos / 10000^(2i/D)),
    checked entry by entry with Python's math (odd D ends on a sine column)."""
    length = 50
    table = sinusoidal_table(length, dim)
    assert table.shape == (length, dim)
    expected = torch.empty(length, dim, dtype=torch.float64)
    for pos in range(length):
        for j in range(dim):
            angle = pos / 10000 ** ((j - j % 2) / dim)
            expected[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    torch.testing.assert_close(table.double(), expected, rtol=0, atol=1e-6)


def test_sinusoidal_table_base_and_first_row():
    table = sinusoidal_table(4, 6, base=100.0)
    # Position 0: sin 0 = 0 in even columns, cos 0 = 1 in odd ones.
    assert torch.equal(table[0], torch.tensor([0.0, 1, 0, 1, 0, 1]))
    torch.testing.assert_close(
        table[3, 2].double(), torch.tensor(math.sin(3 / 100 ** (2 / 6))).double()
    )


@pytest.mark.parametrize("grid,dim", [((3, 5), 8), ((7, 7), 96), ((1, 4), 4)])
def test_sincos_2d_table_is_row_then_column_sinusoids(grid, dim):
    """Patch (i, j), row-major: the first D/2 features are the 1-D table of row i, the last
    D/2 that of column j; checked against Python's math for every entry."""
    gh, gw = grid
    table = sincos_2d_table(grid, dim)
    assert table.shape == (gh * gw, dim) and table.dtype == torch.float32
    half = dim // 2
    expected = torch.empty(gh * gw, dim, dtype=torch.float64)
    for i in range(gh):
        for j in range(gw):
            for f in range(dim):
                pos, k = (i, f) if f < half else (j, f - half)
                angle = pos / 10000 ** ((k - k % 2) / half)
                expected[i * gw + j, f] = math.sin(angle) if k % 2 == 0 else math.cos(angle)
    torch.testing.assert_close(table.double(), expected, rtol=0, atol=1e-6)
    # Every patch gets its own position.
    assert torch.unique(table, dim=0).shape[0] == gh * gw


@pytest.mark.parametrize("dim", [2, 6, 10])
def test_sincos_2d_table_needs_dim_divisible_by_4(dim):
    with pytest.raises(ValueError, match=f"dim={dim} .*dim % 4 == 0"):
        sincos_2d_table((2, 2), dim)


def bicubic_reference(grid_rows: torch.Tensor, old: tuple[int, int], new: tuple[int, int]):
    """(gh*gw, D) rows, row-major over the grid -> bicubic resample via F.interpolate."""
    d = grid_rows.shape[-1]
    image = grid_rows.reshape(old[0], old[1], d).permute(2, 0, 1)[None]  # (1, D, gh, gw)
    out = F.interpolate(image, size=new, mode="bicubic", align_corners=False)
    return out[0].permute(1, 2, 0).reshape(new[0] * new[1], d)


@pytest.mark.parametrize(
    "old,new", [((4, 4), (6, 6)), ((2, 3), (4, 5)), ((6, 4), (3, 2)), ((3, 3), (3, 5))]
)
@pytest.mark.parametrize("prefix", [0, 1, 2])
def test_resample_matches_interpolate_and_keeps_prefix(rng, old, new, prefix):
    d = 5
    table = torch.randn(1, prefix + old[0] * old[1], d, generator=rng)
    out = resample_pos_embed(table, new, old, num_prefix_tokens=prefix)
    assert out.shape == (1, prefix + new[0] * new[1], d)
    assert torch.equal(out[:, :prefix], table[:, :prefix]), "[CLS] rows are kept as they are"
    expected = bicubic_reference(table[0, prefix:], old, new)
    torch.testing.assert_close(out[0, prefix:], expected, rtol=1e-6, atol=1e-6)


def test_resample_same_grid_is_identity(rng):
    table = torch.randn(1, 1 + 12, 4, generator=rng)
    out = resample_pos_embed(table, (3, 4), (3, 4))
    assert torch.equal(out, table)


def test_resample_orientation_is_row_major():
    """A table that varies only along the grid's width stays constant down each column:
    swapping height and width in the reshape would break this."""
    gh, gw = 2, 3
    cols = torch.arange(gw, dtype=torch.float32).repeat(gh)  # row-major: 0 1 2 0 1 2
    table = torch.cat([torch.full((1,), 9.0), cols])[None, :, None]  # (1, 1 + 6, 1)
    out = resample_pos_embed(table, (5, 3), (gh, gw))[0, 1:, 0].reshape(5, 3)
    # Same width -> same columns: every row is exactly 0 1 2.
    torch.testing.assert_close(out, torch.arange(3.0).expand(5, 3), rtol=0, atol=1e-6)


def test_resample_constant_table_stays_constant():
    table = torch.full((1, 1 + 16, 3), 0.7)
    out = resample_pos_embed(table, (7, 5), (4, 4))
    torch.testing.assert_close(out, torch.full((1, 1 + 35, 3), 0.7))


def test_resample_float64_is_exact(rng):
    """A float64 table is resampled in float64 (no detour through float32)."""
    table = torch.randn(1, 1 + 9, 4, generator=rng, dtype=torch.float64)
    out = resample_pos_embed(table, (5, 4), (3, 3))
    expected = bicubic_reference(table[0, 1:], (3, 3), (5, 4))
    torch.testing.assert_close(out[0, 1:], expected, rtol=1e-12, atol=1e-12)


def test_resample_keeps_dtype_and_gradient(rng):
    table = torch.randn(1, 1 + 4, 3, generator=rng, dtype=torch.float64, requires_grad=True)
    out = resample_pos_embed(table, (3, 3), (2, 2))
    assert out.dtype == torch.float64
    out.sum().backward()
    assert table.grad is not None and torch.isfinite(table.grad).all()
    assert table.grad[0, 1:].abs().sum() > 0


def test_resample_wrong_row_count_raises(rng):
    table = torch.randn(1, 1 + 10, 3, generator=rng)
    with pytest.raises(ValueError, match=r"10 grid rows.*3x3 = 9"):
        resample_pos_embed(table, (4, 4), (3, 3))
