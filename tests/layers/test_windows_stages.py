"""Window partition, patch merging and stage stacks against written-out definitions: windows
by coordinates, Swin's region mask by its three slices per axis, windowed attention as full
attention under an explicit block mask."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import Tensor, nn

from tfam.config import BaseConfig
from tfam.layers import (
    EncoderBlock,
    PatchMerging,
    StageSpec,
    StageStack,
    TransformerStack,
    WindowPartition,
)


def randomize_(module: nn.Module, seed: int = 0) -> nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5 + (p.ndim == 1))
    return module


def window_of(r: int, c: int, grid: tuple[int, int], ws: int, shift: int) -> tuple[int, int]:
    """The window (row, column) that token (r, c) falls in after rolling by -shift."""
    return ((r - shift) % grid[0]) // ws, ((c - shift) % grid[1]) // ws


def swin_labels(hp: int, wp: int, ws: int, shift: int) -> Tensor:
    """Swin's region labels on the rolled map, written out: per axis the slices
    [0, -ws), [-ws, -shift), [-shift, end), numbered row-major."""
    labels = torch.zeros(hp, wp, dtype=torch.long)
    cuts = (slice(0, -ws), slice(-ws, -shift), slice(-shift, None))
    for n, (rows, cols) in enumerate(itertools.product(cuts, cuts)):
        labels[rows, cols] = n
    return labels


@pytest.mark.parametrize(
    "grid, window, shift",
    [((8, 8), 4, 0), ((8, 8), 4, 2), ((10, 7), 4, 0), ((10, 7), 4, 2), ((5, 9), 3, 1),
     ((3, 3), 4, 2), ((6, 6), 1, 0)],
)  # fmt: skip
def test_merge_inverts_partition(grid, window, shift):
    part = WindowPartition(window, shift)
    x = torch.randn(2, grid[0] * grid[1], 6)
    windows, mask = part.partition(x, grid)
    nw = part.num_windows(grid)
    assert windows.shape == (2 * nw, window * window, 6)
    assert (mask is None) == (part.shift_for(grid) == 0)
    if mask is not None:
        assert mask.shape == (2 * nw, 1, window * window, window * window)
    assert torch.equal(part.merge(windows, grid), x)


@pytest.mark.parametrize("grid, shift", [((8, 8), 0), ((8, 12), 2), ((6, 5), 0), ((6, 5), 1)])
def test_windows_hold_the_tokens_their_coordinates_say(grid, shift):
    ws = 3 if grid == (6, 5) else 4
    part = WindowPartition(ws, shift)
    hp, wp = part.padded_grid(grid)
    ids = torch.arange(1, grid[0] * grid[1] + 1, dtype=torch.float)  # 0 marks padding
    windows, _ = part.partition(ids.view(1, -1, 1).repeat(2, 1, 1), grid)
    windows = windows[..., 0].view(2, hp // ws, wp // ws, ws, ws)
    for wr, wc, i, j in itertools.product(range(hp // ws), range(wp // ws), range(ws), range(ws)):
        r, c = (wr * ws + i + shift) % hp, (wc * ws + j + shift) % wp  # undo the roll
        expected = r * grid[1] + c + 1 if r < grid[0] and c < grid[1] else 0
        assert windows[1, wr, wc, i, j] == expected


@pytest.mark.parametrize("grid, window, shift", [((8, 8), 4, 2), ((12, 8), 4, 1), ((7, 9), 3, 1)])
def test_shifted_mask_is_swins_region_mask(grid, window, shift):
    part = WindowPartition(window, shift)
    hp, wp = part.padded_grid(grid)
    labels = swin_labels(hp, wp, window, shift)
    per_window = labels.view(hp // window, window, wp // window, window).transpose(1, 2)
    per_window = per_window.reshape(-1, window * window)
    expected = per_window[:, :, None] == per_window[:, None, :]
    assert torch.equal(part.region_mask(grid), expected)
    # every window keeps the diagonal; the wrapped windows (last row or column) block pairs
    assert expected.diagonal(dim1=1, dim2=2).all()
    assert not expected[-1].all() and expected[0].all()


def test_a_grid_of_one_window_is_not_shifted():
    """Swin's rule: when a window spans the grid along an axis, there is no border to shift
    across, so the block attends within plain windows."""
    part, plain = WindowPartition(4, 2), WindowPartition(4)
    for grid in ((4, 8), (3, 12), (4, 4)):
        x = torch.randn(2, grid[0] * grid[1], 3)
        assert part.shift_for(grid) == 0
        windows, mask = part.partition(x, grid)
        assert mask is None and part.region_mask(grid) is None
        assert torch.equal(windows, plain.partition(x, grid)[0])
        assert torch.equal(part.merge(windows, grid), x)
    assert part.shift_for((5, 9)) == 2


def block_mask(grid: tuple[int, int], ws: int, shift: int) -> Tensor:
    """(N, N) full-attention mask of windowed attention, from coordinates alone: same window
    after the roll, and not brought together by it (rows and columns less than ws apart)."""
    coords = [(r, c) for r in range(grid[0]) for c in range(grid[1])]
    n = len(coords)
    mask = torch.zeros(n, n, dtype=torch.bool)
    for a, (ra, ca) in enumerate(coords):
        for b, (rb, cb) in enumerate(coords):
            same = window_of(ra, ca, grid, ws, shift) == window_of(rb, cb, grid, ws, shift)
            mask[a, b] = same and abs(ra - rb) < ws and abs(ca - cb) < ws
    return mask


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("grid, shift", [((8, 8), 0), ((8, 8), 2), ((8, 12), 2), ((12, 8), 1)])
def test_windowed_attention_is_full_attention_under_a_block_mask(grid, shift, norm_first):
    ws = 4
    config = BaseConfig(dim=16, heads=2, attention="math", norm_first=norm_first)
    block = randomize_(EncoderBlock(config)).eval()
    x = torch.randn(2, grid[0] * grid[1], 16)
    block.token_partition = WindowPartition(ws, shift)
    out, weights = block(x, grid=grid, need_weights=True)
    block.token_partition = None
    mask = block_mask(grid, ws, shift)
    full, full_weights = block(x, mask=mask, need_weights=True)
    torch.testing.assert_close(out, full)
    # each window's weights are the full weights between that window's tokens
    nh, nw = grid[0] // ws, grid[1] // ws
    weights = weights.view(2, nh * nw, 2, ws * ws, ws * ws)
    for w, (wr, wc) in enumerate(itertools.product(range(nh), range(nw))):
        rows = [((wr * ws + i + shift) % grid[0]) * grid[1] + (wc * ws + j + shift) % grid[1]
                for i in range(ws) for j in range(ws)]  # fmt: skip
        index = torch.tensor(rows)
        torch.testing.assert_close(weights[:, w], full_weights[:, :, index][:, :, :, index])


def test_padding_tokens_are_zeros_that_attention_sees():
    """Swin's padding: the normalised tokens are padded with zeros, which take part in
    attention (keys with zero projections plus bias); merge drops their outputs."""
    config = BaseConfig(dim=8, heads=2, attention="math")
    block = randomize_(EncoderBlock(config)).eval()
    block.token_partition = WindowPartition(4)
    x = torch.randn(1, 9, 8)  # a 3 x 3 grid: one 4 x 4 window, 7 padding tokens
    out = block(x, grid=(3, 3))[0]
    padded = torch.zeros(1, 16, 8)
    h = block.norm1(x).view(1, 3, 3, 8)
    padded.view(1, 4, 4, 8)[:, :3, :3] = h
    z = block.mhsa(padded)[0].view(1, 4, 4, 8)[:, :3, :3].reshape(1, 9, 8)
    y = x + z
    torch.testing.assert_close(out, y + block.mlp(block.norm2(y)))


def test_patch_merging_by_its_formula():
    config = BaseConfig(dim=4, heads=1, norm_eps=1e-5)
    merge = randomize_(PatchMerging(config))
    assert merge.reduction.out_features == 8 and merge.reduction.bias is None
    for grid in ((4, 6), (5, 3)):
        x = torch.randn(2, grid[0] * grid[1], 4)
        out, new = merge(x, grid)
        assert new == merge.output_grid(grid) == ((grid[0] + 1) // 2, (grid[1] + 1) // 2)
        assert out.shape == (2, new[0] * new[1], 8)
        img = x.view(2, *grid, 4)

        def at(r: int, c: int, img: Tensor = img, grid: tuple[int, int] = grid) -> Tensor:
            inside = r < grid[0] and c < grid[1]
            return img[:, r, c] if inside else torch.zeros(2, 4)

        for i, j in itertools.product(range(new[0]), range(new[1])):
            group = torch.cat([at(2 * i, 2 * j), at(2 * i + 1, 2 * j), at(2 * i, 2 * j + 1),
                               at(2 * i + 1, 2 * j + 1)], dim=-1)  # fmt: skip
            expected = merge.reduction(merge.norm(group))
            torch.testing.assert_close(out[:, i * new[1] + j], expected)


def stack(**fields: object) -> StageStack:
    torch.manual_seed(0)
    config = BaseConfig(dim=8, heads=2, **fields)
    return StageStack(
        config,
        [StageSpec(8, 2, 2, window=2, shift=True), StageSpec(16, 4, 1),
         StageSpec(24, 3, 2, window=2, ffn_dim=40)],
    )  # fmt: skip


def test_stage_stack_shapes_configs_and_drop_path():
    st = stack(drop_path=0.3, ffn_dim=16).eval()
    x = torch.randn(3, 36, 8)
    out, grid, weights = st(x, (6, 6), need_weights=True)
    assert st.grids((6, 6)) == [(6, 6), (3, 3), (2, 2)]
    assert grid == (2, 2) and out.shape == (3, 4, 24)
    # stage 1: 9 windows of 2 x 2; stage 2: global over 3 x 3; stage 3: one window of 2 x 2
    assert [tuple(w.shape) for w in weights] == [(27, 2, 4, 4)] * 2 + [(3, 4, 9, 9)] + [
        (3, 3, 4, 4)
    ] * 2
    assert [b.mhsa.heads for b in st.blocks] == [2, 2, 4, 3, 3]
    # the MLP ratio of the config (16 / 8) per stage, unless a stage sets its own
    assert [b.mlp.fc1.out_features for b in st.blocks] == [16, 16, 32, 40, 40]
    assert [b.token_partition and b.token_partition.shift for b in st.blocks] == [0, 1, None, 0, 0]
    rates = [b.drop_path.p for b in st.blocks]
    assert rates == pytest.approx([0.0, 0.075, 0.15, 0.225, 0.3])
    assert st.stages[0].downsample is None
    assert [s.downsample.out_dim for s in st.stages[1:]] == [16, 24]
    assert st(x, (6, 6))[2] is None


def test_gradients_reach_every_parameter():
    st = stack()
    x = torch.randn(2, 25, 8, requires_grad=True)
    out, _, _ = st(x, (5, 5))
    out.square().mean().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for name, p in st.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def test_a_block_without_partition_is_unchanged():
    """The hook costs nothing when absent: a stack's blocks give what they gave before."""
    config = BaseConfig(dim=8, heads=2, depth=2)
    torch.manual_seed(0)
    st = TransformerStack(config).eval()
    assert all(b.token_partition is None for b in st.blocks)
    x = torch.randn(2, 5, 8)
    out = st(x)[0]
    manual = x
    for b in st.blocks:
        manual = b(manual)[0]
    torch.testing.assert_close(out, manual, rtol=0, atol=0)


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: WindowPartition(0), "window=0 is invalid"),
        (lambda: WindowPartition(4, 4), r"shift=4 is invalid: expected an int in \[0, 4\)"),
        (lambda: StageSpec(8, 3, 1), "heads=3 is invalid"),
        (lambda: StageSpec(8, 2, 1, shift=True), "shift=True is invalid"),
        (lambda: StageSpec(8, 2, 0), "depth=0 is invalid"),
        (lambda: StageStack(BaseConfig(dim=8, heads=2), []), "stages=.. is invalid"),
        (lambda: WindowPartition(2).partition(torch.zeros(1, 5, 4), (2, 2)), "x has shape"),
        (lambda: WindowPartition(2).partition(torch.zeros(1, 4, 4), (2, 0)), "grid=.2, 0."),
        (lambda: WindowPartition(2).merge(torch.zeros(3, 4, 4), (4, 4)), "windows has shape"),
        (lambda: stack()(torch.zeros(1, 4, 6), (2, 2)), r"expected \(B, Hg\*Wg, 8\)"),
        (
            lambda: PatchMerging(BaseConfig(dim=4, heads=1))(torch.zeros(1, 5, 4), (2, 2)),
            "x has shape",
        ),
    ],
)
def test_errors_name_the_argument(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_a_partitioned_block_needs_its_grid_and_refuses_a_cache():
    block = EncoderBlock(BaseConfig(dim=8, heads=2))
    block.token_partition = WindowPartition(2)
    x = torch.randn(1, 4, 8)
    with pytest.raises(ValueError, match="grid=None is invalid"):
        block(x)
    with pytest.raises(ValueError, match="queries=1 is invalid with a token_partition"):
        block(x, grid=(2, 2), queries=1)


class TableBias(nn.Module):
    """Swin's relative position bias, written out for this test (the Swin family brings its
    own): a ((2Ws-1)^2, H) table read at each pair's (dy, dx), -> (H, Ws^2, Ws^2)."""

    def __init__(self, table: Tensor, window: int) -> None:
        super().__init__()
        self.table, self.window = table, window

    def forward(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        ws = self.window
        y, x = q_pos // ws, q_pos % ws  # positions 0..Ws^2-1 inside the window, row-major
        dy = y[:, None] - (k_pos // ws)[None, :] + ws - 1
        dx = x[:, None] - (k_pos % ws)[None, :] + ws - 1
        return self.table[dy * (2 * ws - 1) + dx].permute(2, 0, 1)


@pytest.mark.parametrize("grid", [(16, 16), (18, 18), (16, 20)])
def test_stage_stack_is_hugging_face_swin_encoder(grid):
    """The bricks carry Swin as Hugging Face computes it: windows, shifted windows with their
    mask (and no shift on a grid of one window: the last stage of (16, 16)), padding of the
    grid to whole windows (18 x 18 -> 20 x 20), patch merging of an odd grid (9 x 9), with a
    per-layer bias table given to each block's attention."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.swin.modeling_swin import SwinEncoder

    ws = 4
    hf_config = transformers.SwinConfig(
        embed_dim=16, depths=[2, 2, 2], num_heads=[2, 4, 8], window_size=ws, layer_norm_eps=1e-5
    )
    hf_config._attn_implementation = "eager"
    torch.manual_seed(0)
    hf = SwinEncoder(hf_config, grid).eval()
    with torch.no_grad():  # scores stay moderate: Hugging Face masks with -100, not -inf
        for p in hf.parameters():
            p.copy_(torch.randn(p.shape) * 0.2)
    config = BaseConfig(dim=16, heads=2, norm_eps=1e-5)
    ours = StageStack(config, [StageSpec(16 << i, 2 << i, 2, ws, shift=True) for i in range(3)])
    ours = ours.eval()
    with torch.no_grad():
        for block, theirs in zip(ours.blocks, [b for s in hf.layers for b in s.blocks]):
            block.norm1.load_state_dict(theirs.layernorm_before.state_dict())
            block.norm2.load_state_dict(theirs.layernorm_after.state_dict())
            att = theirs.attention
            projections = (att.q_proj, att.k_proj, att.v_proj)
            block.mhsa.qkv.weight.copy_(torch.cat([p.weight for p in projections]))
            block.mhsa.qkv.bias.copy_(torch.cat([p.bias for p in projections]))
            block.mhsa.out_proj.load_state_dict(att.o_proj.state_dict())
            block.mlp.fc1.load_state_dict(theirs.mlp.fc1.state_dict())
            block.mlp.fc2.load_state_dict(theirs.mlp.fc2.state_dict())
            table = att.relative_position_bias.relative_position_bias_table
            block.mhsa.bias_provider = TableBias(table, ws)
        for stage, theirs in zip(ours.stages[1:], hf.layers[:-1]):
            stage.downsample.load_state_dict(theirs.downsample.state_dict())
        x = torch.randn(2, grid[0] * grid[1], 16)
        expected = hf(x, grid).last_hidden_state
        out, last, _ = ours(x, grid)
    assert last == ours.grids(grid)[-1] and out.shape == expected.shape
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
