"""Position encodings. Self-attention alone is permutation-equivariant over tokens; these
give each token its place.

The bricks: tables added to the tokens (sinusoidal, 2-D sine-cosine, learned with resampling),
Q/K transforms (:class:`RotaryEmbedding`; :class:`AxialRotaryEmbedding` on a patch grid) and a
bias provider (:class:`ALiBi`).

The schemes a config names by ``position``: one :class:`PositionScheme` subclass each, which
registers itself by its ``name`` and says how it acts (``acts``: added to the ``"tokens"``,
rotating Q and K (``"qk"``), a bias on the ``"scores"``, or ``"none"``) and what it indexes
(``domain``: a 1-D ``"sequence"``, a 2-D patch ``"grid"``, or ``"any"``). A family builds its
scheme with :func:`build_position` and calls :meth:`PositionScheme.add` on its embedded tokens;
:class:`~tfam.layers.block.TransformerStack` asks the same class for its Q/K transform and its
score bias. Where the tokens sit is computed once per forward, as :class:`TokenPositions`.

A new scheme is one subclass here (or in any module imported before the config is built)::

    class Mine(PositionScheme):
        name, acts, domain = "mine", "tokens", "sequence"
        def values(self, where, table): ...          # (L, D) or (B, L, D) to add
        def describe(self): return "add my table"
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tfam.config import (
    POSITION_ACTS,
    POSITION_DOMAINS,
    POSITION_SCHEMES,
    BaseConfig,
    check_choice,
    config_error,
)


def resample_pos_embed(
    pos_embed: Tensor,
    new_grid: tuple[int, int],
    old_grid: tuple[int, int],
    num_prefix_tokens: int = 1,
) -> Tensor:
    """Bicubic resampling of a learned 2-D position table to a new patch grid.

    pos_embed (1, prefix + gh*gw, D) -> (1, prefix + new_h*new_w, D); the prefix ([CLS]) rows
    are kept as they are.
    """
    if tuple(new_grid) == tuple(old_grid):
        return pos_embed
    prefix, grid = pos_embed[:, :num_prefix_tokens], pos_embed[:, num_prefix_tokens:]
    gh, gw = old_grid
    if grid.shape[1] != gh * gw:
        raise ValueError(
            f"pos_embed has {grid.shape[1]} grid rows; expected old_grid {gh}x{gw} = {gh * gw}"
        )
    d = grid.shape[-1]
    grid = grid.reshape(1, gh, gw, d).permute(0, 3, 1, 2)
    # Interpolate in at least float32 (half precision loses the table); float64 stays float64.
    work = torch.promote_types(grid.dtype, torch.float32)
    grid = F.interpolate(grid.to(work), size=tuple(new_grid), mode="bicubic", align_corners=False)
    grid = grid.to(pos_embed.dtype).permute(0, 2, 3, 1).reshape(1, -1, d)
    return torch.cat([prefix, grid], dim=1)


def sinusoidal_rows(pos: Tensor, dim: int, base: float = 10000.0) -> Tensor:
    """The rows of :func:`sinusoidal_table` at ``pos`` (any shape (...), int), computed for any
    position: (..., D) float32, computed in float64."""
    angle = pos.to(torch.float64)[..., None]
    inv = torch.exp(
        torch.arange(0, dim, 2, dtype=torch.float64, device=pos.device) * (-math.log(base) / dim)
    )
    rows = torch.zeros(*pos.shape, dim, dtype=torch.float64, device=pos.device)
    rows[..., 0::2] = torch.sin(angle * inv)
    rows[..., 1::2] = torch.cos(angle * inv)[..., : dim // 2]
    return rows.float()


def sinusoidal_table(length: int, dim: int, base: float = 10000.0) -> Tensor:
    """PE(pos, 2i) = sin(pos / base^(2i/D)), PE(pos, 2i+1) = cos(...). -> (length, D)."""
    return sinusoidal_rows(torch.arange(length), dim, base)


def sinusoidal_rows_halves(pos: Tensor, dim: int, base: float = 10000.0) -> Tensor:
    """The rows of :func:`sinusoidal_table_halves` at ``pos`` (any shape (...), int), computed
    for any position: (..., D) float32, computed in float64."""
    half = torch.arange(0, dim, 2, dtype=torch.float64, device=pos.device)
    angles = pos.to(torch.float64)[..., None] / base ** (half / dim)
    return torch.cat([angles.sin(), angles.cos()[..., : dim // 2]], dim=-1).float()


def sinusoidal_table_halves(length: int, dim: int, base: float = 10000.0) -> Tensor:
    """The sinusoids of :func:`sinusoidal_table` laid out in halves, as Marian (and Hugging
    Face's MarianMT) stores them: every sine first, then every cosine,
    PE(pos, i) = sin(pos / base^(2i/D)) and PE(pos, ceil(D/2) + i) = cos(pos / base^(2i/D)).
    -> (length, D) float32, computed in float64."""
    return sinusoidal_rows_halves(torch.arange(length), dim, base)


def sincos_2d_table(grid: tuple[int, int], dim: int, base: float = 10000.0) -> Tensor:
    """Fixed 2-D sine-cosine positions for a patch grid: the first D/2 features encode the
    row with :func:`sinusoidal_table`, the last D/2 the column. -> (gh*gw, D) float32."""
    if dim % 4:
        raise ValueError(f"dim={dim} is invalid for 2-D sine-cosine positions: needs dim % 4 == 0")
    gh, gw = grid
    rows = sinusoidal_table(gh, dim // 2, base)[:, None, :].expand(gh, gw, dim // 2)
    cols = sinusoidal_table(gw, dim // 2, base)[None, :, :].expand(gh, gw, dim // 2)
    return torch.cat([rows, cols], dim=-1).reshape(gh * gw, dim)


class RotaryEmbedding(nn.Module):
    """RoPE (Su et al. 2021): rotate each (x_a, x_b) feature pair of Q and K by the angle
    pos * base^(-2i/Dh), so that q_m . k_n depends on m - n only. A Q/K transform of
    :class:`~tfam.layers.attention.MultiHeadAttention`.

    ``layout`` says which features form a pair: ``"half"`` pairs i with i + Dh/2 (GPT-NeoX,
    LLaMA, Hugging Face's ``rotate_half``); ``"interleaved"`` pairs 2i with 2i+1 (the paper,
    GPT-J). Weights converted from one layout do not work in the other.

    (q (B, H, Lq, Dh), k (B, H, Lk, Dh), q_pos, k_pos) -> rotated (q, k); positions are int64
    (L,) or (B, L). Angles are computed in float64, then cast to the input dtype.
    """

    def __init__(self, head_dim: int, base: float = 10000.0, layout: str = "half") -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"head_dim={head_dim} is invalid for RoPE: expected an even width")
        if layout not in ("half", "interleaved"):
            raise ValueError(f"layout={layout!r} is invalid: expected 'half' or 'interleaved'")
        self.head_dim, self.base, self.layout = head_dim, base, layout
        inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        self.register_buffer("inv_freq", inv, persistent=False)

    def cos_sin(self, pos: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """(L,) or (B, L) -> cos, sin broadcastable to (B, H, L, Dh)."""
        angles = pos.to(torch.float64)[..., None] * self.inv_freq.to(pos.device)  # (..., L, Dh/2)
        if self.layout == "half":
            angles = torch.cat([angles, angles], dim=-1)
        else:
            angles = angles.repeat_interleave(2, dim=-1)
        if angles.ndim == 3:  # (B, L, Dh): one row of positions per sample
            angles = angles[:, None]
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def rotate(self, x: Tensor, pos: Tensor) -> Tensor:
        cos, sin = self.cos_sin(pos, x.dtype)
        if self.layout == "half":
            a, b = x.chunk(2, dim=-1)
            turned = torch.cat([-b, a], dim=-1)
        else:
            a, b = x[..., 0::2], x[..., 1::2]
            turned = torch.stack([-b, a], dim=-1).flatten(-2)
        return x * cos + turned * sin

    def forward(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        return self.rotate(q, q_pos), self.rotate(k, k_pos)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base}, layout={self.layout!r}"


class AxialRotaryEmbedding(nn.Module):
    """2-D axial RoPE over a patch grid (as RoPE-ViT's axial variant, Heo et al. 2024, and
    EVA-02): the first Dh/2 features of each head are rotated by the patch's row, the last
    Dh/2 by its column, each half as a 1-D :class:`RotaryEmbedding` of width Dh/2 (half
    layout, angles pos * base^(-2i/(Dh/2))). So q_(r,c) . k_(r',c') depends on (r - r', c - c')
    only: the first half's product on r - r', the second's on c - c'.

    (q (B, H, Lq, Dh), k (B, H, Lk, Dh), q_pos (2, Lq), k_pos (2, Lk)) -> rotated (q, k);
    positions are int64 (row, column) pairs, rows first (:meth:`TokenPositions.on_grid`).
    """

    def __init__(self, head_dim: int, base: float = 10000.0) -> None:
        super().__init__()
        if head_dim % 4:
            raise ValueError(
                f"head_dim={head_dim} is invalid for 2-D RoPE: expected a multiple of 4 (two "
                "halves, each of feature pairs)"
            )
        self.head_dim, self.base = head_dim, base
        self.axis = RotaryEmbedding(head_dim // 2, base)  # one rotation per axis, same angles

    def rotate(self, x: Tensor, pos: Tensor) -> Tensor:
        if pos.ndim != 2 or pos.shape[0] != 2 or pos.shape[1] != x.shape[-2]:
            raise ValueError(
                f"positions of shape {tuple(pos.shape)} are invalid for 2-D RoPE: expected "
                f"(2, {x.shape[-2]}) (row, column) per token; pass TokenPositions.on_grid(grid, "
                "prefix) to the stack"
            )
        rows, cols = x.chunk(2, dim=-1)
        return torch.cat([self.axis.rotate(rows, pos[0]), self.axis.rotate(cols, pos[1])], dim=-1)

    def forward(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        return self.rotate(q, q_pos), self.rotate(k, k_pos)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base}, axes=(row, column)"


def alibi_slopes(heads: int) -> Tensor:
    """ALiBi's per-head slopes (Press et al. 2022): 2^(-8/n), 2^(-16/n), ... for n = heads when
    n is a power of two; otherwise those of the next lower power of two, then every other slope
    of the next higher one. -> (heads,) float64."""

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    lower = 2 ** math.floor(math.log2(heads))
    slopes = power_of_two(lower)
    if lower != heads:
        slopes += power_of_two(2 * lower)[0::2][: heads - lower]
    return torch.tensor(slopes, dtype=torch.float64)


class ALiBi(nn.Module):
    """Attention with linear biases: score(i, j) += -slope_h * |i - j|, no position embedding.
    A bias provider: computed once per forward and shared by every block of a stack.

    (q_pos (Lq,), k_pos (Lk,)) -> bias (H, Lq, Lk) float32.
    """

    def __init__(self, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.register_buffer("slopes", alibi_slopes(heads).float(), persistent=False)

    def forward(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        distance = (q_pos[:, None] - k_pos[None, :]).abs().float()
        return -self.slopes.to(distance.device)[:, None, None] * distance

    def extra_repr(self) -> str:
        return f"heads={self.heads}"


@dataclass(frozen=True)
class TokenPositions:
    """Where the tokens of one forward sit: ``offset + arange(length)`` in every row, or per
    row (``rows`` (B, length) int64) when rows differ (left-padded batches count from each
    row's first real token). ``offset`` is the number of cached tokens before them. On a patch
    ``grid`` (:meth:`on_grid`: ViT's tokens, ``prefix`` tokens then gh*gw patches row-major)
    each token sits at a (row, column) pair instead.

    Built once per forward (by the family, or by the stack when the family passes none) and
    read by the token table, the Q/K transform and the score bias alike."""

    offset: int
    length: int
    rows: Tensor | None = None
    grid: tuple[int, int] | None = None  # the tokens are prefix + gh*gw patches, row-major
    prefix: int = 0

    @classmethod
    def on_grid(cls, grid: tuple[int, int], prefix: int = 0) -> TokenPositions:
        """The tokens of a patch grid (gh, gw) after ``prefix`` tokens ([CLS]): ``query``
        gives (2, prefix + gh*gw) (row, column) pairs, the prefix tokens at (0, 0)."""
        gh, gw = int(grid[0]), int(grid[1])
        return cls(0, prefix + gh * gw, grid=(gh, gw), prefix=prefix)

    @classmethod
    def count(cls, length: int, offset: int = 0, key_mask: Tensor | None = None) -> TokenPositions:
        """Positions of ``length`` new tokens after ``offset`` cached ones; with a key mask
        (B, offset + length), True = real token, per row from its first real token (Hugging
        Face's ``cumsum(attention_mask) - 1``; padding positions are clamped to 0, their
        outputs are never read)."""
        if key_mask is None:
            return cls(offset, length)
        rows = (key_mask.long().cumsum(dim=-1) - 1).clamp_(min=0)[:, -length:]
        return cls(offset, length, rows)

    def query(self, device: torch.device) -> Tensor:
        """Positions of the new tokens: (length,) or (B, length) int64; on a grid (2, length),
        rows first, then columns (the prefix tokens at (0, 0)). On a grid, token
        ``prefix + i`` sits at cell divmod(i, gw) (row-major, as PatchEmbed and a raster of
        pixels), counted from ``offset``: a decoder reading a raster one pixel at a time
        (iGPT's 2-D RoPE) gets each new token's cell."""
        if self.grid is not None:
            gw = self.grid[1]
            cell = torch.arange(self.offset, self.offset + self.length, device=device)
            cell = (cell - self.prefix).clamp_min(0)  # the prefix tokens at (0, 0)
            return torch.stack([cell // gw, cell % gw])
        if self.rows is not None:
            return self.rows
        return self.shared(device)

    def shared(self, device: torch.device) -> Tensor:
        """``offset + arange(length)`` (length,), whatever the rows: for relative schemes,
        which a shift common to a row does not change."""
        return torch.arange(self.offset, self.offset + self.length, device=device)

    def keys(self, device: torch.device) -> Tensor:
        """Positions of every key so far, cached and new: (offset + length,)."""
        return torch.arange(self.offset + self.length, device=device)


class PositionScheme(nn.Module):
    """Base of every position scheme: a subclass sets ``name`` (which registers it in
    :data:`tfam.config.POSITION_SCHEMES`), ``acts``, ``domain`` and ``learned``, and
    implements what its action needs:

    - ``acts = "tokens"``: :meth:`values` (and :meth:`make_table` when it learns a table);
    - ``acts = "qk"``: :meth:`qk_transform`, given to every self-attention of a stack;
    - ``acts = "scores"``: :meth:`score_bias`, the stack's shared bias provider;

    and :meth:`describe`, one line that explain and viz show. Fixed tables are non-persistent
    buffers of the scheme; a learned table is a parameter the family holds under its own name
    (so saved models keep their state-dict names) and passes back to :meth:`add`.

    Built from a config with the shape the family gives: ``length`` rows of a sequence, or a
    patch ``grid`` (gh, gw) after ``prefix`` tokens ([CLS]) for a grid family; a stack builds
    it with neither (it only asks for the Q/K transform and the score bias).
    """

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""  # how a figure or a table names it: "2-D sine-cosine"
    acts: ClassVar[str] = "none"
    domain: ClassVar[str] = "any"
    learned: ClassVar[bool] = False
    # False: what it adds to new tokens reads the tokens before them (a recurrent network), so
    # decoding cannot continue from a KV cache and generate re-encodes at every step.
    incremental: ClassVar[bool] = True
    # True: the scheme is a table of max_positions rows and refuses a longer sequence
    # (BaseConfig.check_length); every other scheme runs past the training length.
    bounds_length: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        check_choice(f"{cls.__name__}.acts", cls.acts, POSITION_ACTS)
        check_choice(f"{cls.__name__}.domain", cls.domain, POSITION_DOMAINS)
        if cls.name:
            POSITION_SCHEMES[cls.name] = cls

    def __init__(
        self,
        config: BaseConfig,
        length: int = 0,
        grid: tuple[int, int] | None = None,
        prefix: int = 0,
    ) -> None:
        super().__init__()
        self.dim, self.heads, self.head_dim = config.dim, config.heads, config.head_dim
        self.length = length
        self.grid = None if grid is None else (int(grid[0]), int(grid[1]))
        self.prefix = prefix

    @classmethod
    def check_config(cls, config: BaseConfig) -> None:
        """Refuse (one ``ValueError`` naming the field) a config this scheme cannot serve."""

    @property
    def rows(self) -> int:
        """Rows of a table: prefix + gh*gw on a grid, else ``length``."""
        if self.grid is not None:
            return self.prefix + self.grid[0] * self.grid[1]
        return self.length

    def make_table(self) -> nn.Parameter | None:
        """The learned table the family holds (zeros; the family initialises it), or None."""
        return None

    def values(
        self, where: TokenPositions | tuple[int, int], table: Tensor | None = None
    ) -> Tensor | None:
        """What to add to the tokens, or None: for ``where`` = :class:`TokenPositions`,
        (length, D) or (B, length, D); for ``where`` = a patch grid (gh, gw), (1, prefix +
        gh*gw, D). ``table``: the family's learned table, for a learned scheme."""
        return None

    def add(
        self, x: Tensor, where: TokenPositions | tuple[int, int], table: Tensor | None = None
    ) -> Tensor:
        """x (B, L, D) plus :meth:`values`; x itself when nothing is added. A fixed table is
        cast to x's dtype; a learned one is added as it is (under autocast the sum is then
        in the table's precision, as it always was)."""
        values = self.values(where, table)
        if values is None:
            return x
        return x + (values if self.learned else values.to(x.dtype))

    def qk_transform(self) -> nn.Module | None:
        """A new Q/K transform for one self-attention (see ``QKTransform``), or None."""
        return None

    def score_bias(self, causal: bool = False) -> nn.Module | None:
        """A bias provider ``(q_pos (Lq,), k_pos (Lk,)) -> (H, Lq, Lk)``, or None. ``causal``:
        the stack masks the keys after each query (a directional bias, T5's, spends its
        buckets on the past only)."""
        return None

    def describe(self) -> str:
        """One line: what this scheme does to the tokens or the attention (explain and viz
        print it); every scheme defines its own."""
        raise NotImplementedError(
            f"position {self.name!r} ({type(self).__name__}) has no describe()"
        )

    def extra_repr(self) -> str:
        shape = f"grid={self.grid}, prefix={self.prefix}" if self.grid else f"length={self.length}"
        return f"{self.name!r}, acts={self.acts!r}, {shape}"


def build_position(
    config: BaseConfig,
    length: int = 0,
    grid: tuple[int, int] | None = None,
    prefix: int = 0,
) -> PositionScheme:
    """The scheme ``config.position`` names, for a sequence of ``length`` or a patch ``grid``."""
    check_choice("position", config.position, POSITION_SCHEMES)
    return POSITION_SCHEMES[config.position](config, length, grid, prefix)


def _rows_of(source: Tensor, where: TokenPositions) -> Tensor:
    """Rows of a (N, D) table at the tokens' positions: a slice when every row shares them."""
    if where.rows is None:
        return source[where.offset : where.offset + where.length]
    return source[where.rows]


class LearnedPosition(PositionScheme):
    """A learned table: (length, D) for a sequence, indexed by position; (1, prefix + gh*gw, D)
    for a patch grid, covering the prefix tokens too and resampled bicubically for another grid
    (:func:`resample_pos_embed`)."""

    name = "learned"
    title = "learned"
    acts = "tokens"
    domain = "any"
    learned = True
    bounds_length = True  # a sequence table has max_positions rows; a grid one is resampled

    def make_table(self) -> nn.Parameter:
        if self.grid is not None:
            return nn.Parameter(torch.zeros(1, self.rows, self.dim))
        return nn.Parameter(torch.zeros(self.length, self.dim))

    def values(
        self, where: TokenPositions | tuple[int, int], table: Tensor | None = None
    ) -> Tensor:
        if table is None:
            raise ValueError("table is None: a learned position scheme adds the family's table")
        if isinstance(where, TokenPositions):
            end, rows = where.offset + where.length, table.shape[0]
            if end > rows:
                raise ValueError(
                    f"a sequence of {end} positions is longer than max_positions={rows}, which "
                    f"bounds position='learned' (a table of {rows} rows; other schemes run "
                    "past it)"
                )
            return _rows_of(table, where)
        assert self.grid is not None, "a grid needs a scheme built with grid="
        return resample_pos_embed(table, where, self.grid, self.prefix)

    def describe(self) -> str:
        if self.grid is not None:
            gh, gw = self.grid
            return (
                f"add the learned position table ({self.rows} x D = {self.rows} x {self.dim}: "
                f"{self.prefix} prefix + {gh}x{gw} patch rows; resampled bicubically for "
                "another grid)"
            )
        return (
            f"add the learned table (max_positions x D = {self.length} x {self.dim}) at each "
            "token's position"
        )


class SinusoidalPosition(PositionScheme):
    """Fixed sines and cosines (Vaswani et al. 2017, :func:`sinusoidal_table`), indexed by
    position; nothing learned, nothing saved."""

    name = "sinusoidal"
    title = "sinusoidal"
    acts = "tokens"
    domain = "sequence"

    def __init__(self, config: BaseConfig, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        # A family may lay the sinusoids out as Marian does (all sines, then all cosines).
        halves = getattr(config, "sinusoid_layout", "interleaved") == "halves"
        self.make_rows = sinusoidal_rows_halves if halves else sinusoidal_rows
        self.register_buffer(
            "table", self.make_rows(torch.arange(self.length), self.dim), persistent=False
        )

    def values(
        self, where: TokenPositions | tuple[int, int], table: Tensor | None = None
    ) -> Tensor:
        """The table's rows within its ``length``; past it (a sequence longer than training's)
        the same formula's rows, computed for the positions asked: no bound on length."""
        assert isinstance(where, TokenPositions), "sinusoidal positions index a sequence"
        # offset + length bounds every row's positions (per-row ones count real tokens only).
        if where.offset + where.length <= self.table.shape[0]:
            return _rows_of(self.table, where)
        rows = self.make_rows(where.query(self.table.device), self.dim)
        return rows.to(self.table.dtype)

    def describe(self) -> str:
        return (
            "add the fixed sinusoids PE(pos, 2i) = sin(pos / 10000^(2i/D)), "
            f"PE(pos, 2i+1) = cos(...) (a {self.length} x {self.dim} table, rows past it "
            "computed; nothing learned)"
        )


class SinCos2DPosition(PositionScheme):
    """Fixed 2-D sine-cosine positions on a patch grid (:func:`sincos_2d_table`): rows in the
    first D/2 features, columns in the last; the prefix tokens get zeros. Computed exactly for
    any grid; nothing learned, nothing saved."""

    name = "sincos2d"
    title = "2-D sine-cosine"
    acts = "tokens"
    domain = "grid"

    def __init__(self, config: BaseConfig, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        table = self._table(self.grid) if self.grid is not None else torch.zeros(1, 0, self.dim)
        self.register_buffer("table", table, persistent=False)

    @classmethod
    def check_config(cls, config: BaseConfig) -> None:
        if config.dim % 4:
            raise config_error(
                "dim",
                config.dim,
                "position='sincos2d' splits dim into sine and cosine halves for rows and "
                "columns, so dim must be divisible by 4",
            )

    def _table(self, grid: tuple[int, int]) -> Tensor:
        table = sincos_2d_table(grid, self.dim)[None]
        return F.pad(table, (0, 0, self.prefix, 0))  # zero rows for the prefix tokens

    def values(
        self, where: TokenPositions | tuple[int, int], table: Tensor | None = None
    ) -> Tensor:
        assert not isinstance(where, TokenPositions), "2-D sine-cosine positions index a grid"
        if tuple(where) == self.grid:
            return self.table
        return self._table(where).to(self.table.device)

    def describe(self) -> str:
        gh, gw = self.grid or (0, 0)
        return (
            f"add the fixed 2-D sine-cosine table ({gh * gw} x D, nothing learned) to the "
            "patch tokens: rows in the first D/2 features, columns in the last"
            + ("; the prefix tokens get none" if self.prefix else "")
        )


class RotaryPosition(PositionScheme):
    """RoPE: every self-attention rotates Q and K by position; nothing is added to the tokens.
    On a sequence by the token's index (:class:`RotaryEmbedding`, half layout, base 10000);
    built with a patch ``grid`` (a grid family's stack), by the patch's row and column
    (:class:`AxialRotaryEmbedding`: half of each head's features by the row, half by the
    column). The prefix tokens ([CLS]) sit at (0, 0), an angle of 0: they are not rotated, as
    in RoPE-ViT and EVA-02."""

    name = "rope"
    title = "rotary (RoPE)"
    acts = "qk"
    domain = "any"

    @classmethod
    def check_config(cls, config: BaseConfig) -> None:
        grid_only = "sequence" not in type(config).position_domains  # ViT: 2-D, two halves
        if config.head_dim % (4 if grid_only else 2):
            raise config_error(
                "heads",
                config.heads,
                "position='rope' on a patch grid rotates two halves of feature pairs, so the "
                f"head width dim/heads must be a multiple of 4 (dim={config.dim})"
                if grid_only
                else "position='rope' rotates feature pairs, so the head width dim/heads must "
                f"be even (dim={config.dim})",
            )

    def qk_transform(self) -> nn.Module:
        if self.grid is not None:
            return AxialRotaryEmbedding(self.head_dim)
        return RotaryEmbedding(self.head_dim)

    def describe(self) -> str:
        if self.grid is not None:
            return (
                "rotate Q and K of every self-attention by each token's row on the "
                f"{self.grid[0]}x{self.grid[1]} grid (first half of each head's features) and "
                "column (second half) (2-D axial RoPE, base 10000; prefix tokens not rotated): "
                "nothing added to the tokens, nothing learned"
            )
        return (
            "rotate Q and K of every self-attention by each token's position (RoPE, base "
            "10000): nothing added to the tokens, nothing learned"
        )


class AlibiPosition(PositionScheme):
    """ALiBi: -slope_h * |i - j| added to every self-attention score (:class:`ALiBi`),
    computed once per forward for the whole stack; nothing is added to the tokens."""

    name = "alibi"
    title = "ALiBi"
    acts = "scores"
    domain = "sequence"

    def score_bias(self, causal: bool = False) -> nn.Module:
        return ALiBi(self.heads)  # symmetric in i - j: the same for a causal stack

    def describe(self) -> str:
        return (
            "add -slope_h * |i - j| to every self-attention score (ALiBi, one fixed slope per "
            "head): nothing added to the tokens, nothing learned"
        )


class NoPosition(PositionScheme):
    """No position information: the stack is permutation-equivariant over the tokens."""

    name = "none"
    title = "no position"
    acts = "none"
    domain = "any"

    def describe(self) -> str:
        return "no position information: attention alone does not see token order"
