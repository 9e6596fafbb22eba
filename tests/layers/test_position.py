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


# ---------------------------------------------------------------------------------------------
# The registry of schemes: names, declarations, families' accepted lists, a scheme added later


def test_every_registered_scheme_declares_how_it_acts():
    from tfam.config import POSITION_ACTS, POSITION_DOMAINS, POSITION_SCHEMES, BaseConfig
    from tfam.layers.position import PositionScheme, build_position

    assert list(POSITION_SCHEMES)[:6] == [
        "learned", "sinusoidal", "sincos2d", "rope", "alibi", "none"
    ]  # fmt: skip
    for name, cls in POSITION_SCHEMES.items():
        assert issubclass(cls, PositionScheme) and cls.name == name
        assert cls.acts in POSITION_ACTS and cls.domain in POSITION_DOMAINS, name
        assert cls.title, f"{name} has no title"
        config = BaseConfig(dim=16, heads=2, position=name)
        grid = (2, 3) if cls.domain == "grid" else None
        scheme = build_position(config, length=0 if grid else 5, grid=grid, prefix=1 if grid else 0)
        assert isinstance(scheme.describe(), str) and scheme.describe()
        # What it does follows from how it says it acts.
        assert (scheme.qk_transform() is not None) == (cls.acts == "qk"), name
        assert (scheme.score_bias() is not None) == (cls.acts == "scores"), name
        assert (scheme.make_table() is not None) == cls.learned, name


def test_family_position_lists_are_derived_from_the_registry():
    from tfam.models import BertConfig, GPTConfig, TransformerConfig, ViTConfig

    seven = ("learned", "sinusoidal", "rope", "alibi", "none", "relative", "generated")
    assert ViTConfig.position_names() == ("learned", "sincos2d", "rope", "none", "generated")
    assert GPTConfig.position_names() == seven
    assert TransformerConfig.position_names() == seven
    assert BertConfig.position_names() == seven
    with pytest.raises(ValueError, match=r"position='alibi' is invalid: expected one of 'learned'"):
        ViTConfig(dim=16, heads=2, image_size=4, patch_size=2, position="alibi")


def test_scheme_config_checks_name_the_field():
    from tfam.config import BaseConfig

    with pytest.raises(ValueError, match=r"heads=4 is invalid: position='rope'.*even"):
        BaseConfig(dim=12, heads=4, position="rope")  # head width 3


def test_token_positions_count_per_row_from_the_first_real_token():
    from tfam.layers.position import TokenPositions

    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]], dtype=torch.bool)
    where = TokenPositions.count(2, offset=3, key_mask=mask)
    assert torch.equal(where.query(torch.device("cpu")), torch.tensor([[1, 2], [3, 4]]))
    assert torch.equal(where.shared(torch.device("cpu")), torch.tensor([3, 4]))
    assert torch.equal(where.keys(torch.device("cpu")), torch.arange(5))
    plain = TokenPositions.count(2, offset=3)
    assert plain.rows is None and torch.equal(
        plain.query(torch.device("cpu")), torch.tensor([3, 4])
    )


@pytest.fixture
def ramp_scheme():
    """A scheme defined outside tfam: one class, registered for the test's duration."""
    from tfam.config import POSITION_SCHEMES
    from tfam.layers.position import PositionScheme, TokenPositions

    class Ramp(PositionScheme):
        name = "test_ramp"
        title = "ramp"
        acts = "tokens"
        domain = "sequence"

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.register_buffer("step", torch.tensor(0.01), persistent=False)

        def values(self, where, table=None):
            assert isinstance(where, TokenPositions)
            pos = where.query(self.step.device).to(self.step.dtype)
            return pos[..., None].expand(*pos.shape, self.dim) * self.step

        def describe(self) -> str:
            return "add 0.01 * position to every feature"

    yield Ramp
    POSITION_SCHEMES.pop("test_ramp")


def test_a_new_scheme_is_one_class(ramp_scheme, tmp_path):
    """Registered, it is a valid ``position`` for the families whose declarations admit it,
    runs, explains itself and saves; the others refuse it by name."""
    import tfam
    from tfam.models import GPTConfig, TransformerConfig, ViTConfig

    assert "test_ramp" in GPTConfig.position_names()
    assert "test_ramp" in TransformerConfig.position_names()
    assert "test_ramp" not in ViTConfig.position_names()
    torch.manual_seed(0)
    model = tfam.create_model(
        "gpt", dim=16, heads=2, depth=1, vocab_size=11, max_positions=8, position="test_ramp"
    ).eval()
    ids = torch.randint(0, 11, (2, 5))
    plain = model.stack(model.tok_embed(ids))[0]
    shifted = model.stack(model.tok_embed(ids) + torch.arange(5.0)[:, None] * 0.01)[0]
    assert not torch.allclose(plain, shifted)
    torch.testing.assert_close(model.norm(shifted), model.forward_features(ids))
    table = tfam.explain(model)
    assert "add 0.01 * position to every feature" in str(table)
    model.save_pretrained(tmp_path)
    with torch.no_grad():
        torch.testing.assert_close(tfam.from_pretrained(tmp_path)(ids), model(ids), rtol=0, atol=0)


@pytest.mark.parametrize("layout", ["interleaved", "halves"])
def test_sinusoids_past_their_table_are_the_formula_s_rows(layout):
    """A sinusoidal scheme built for 4 rows gives, past them, the rows a longer table holds
    (bit for bit): for a shared offset and for per-row (left-padded) positions."""
    from tfam.layers.position import TokenPositions, build_position, sinusoidal_table_halves
    from tfam.models import TransformerConfig

    config = TransformerConfig(dim=10, heads=2, depth=1, sinusoid_layout=layout)
    scheme = build_position(config, length=4)
    full = (sinusoidal_table if layout == "interleaved" else sinusoidal_table_halves)(12, 10)
    assert torch.equal(scheme.table, full[:4])
    assert torch.equal(scheme.values(TokenPositions(3, 6)), full[3:9])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1], [1] * 8], dtype=torch.bool)
    where = TokenPositions.count(7, offset=1, key_mask=mask)
    assert torch.equal(scheme.values(where), full[where.rows])
