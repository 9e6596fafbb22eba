"""Two more position schemes, each one :class:`~tfam.layers.position.PositionScheme`:

- ``relative``: T5's bucketed relative position bias (Raffel et al. 2020, section 2.1): a
  learned scalar per head and bucket of the distance j - i, added to every self-attention
  score; buckets are exact for small distances and log-spaced up to ``max_distance``;
  bidirectional in an encoder, past-only in a causal stack; one table per stack, shared by all
  its blocks (:class:`T5RelativeBias`, the stack's bias provider).
- ``generated``: positions produced by a small network from the tokens themselves, added to
  them: on a patch grid CPVT's position encoding generator (Chu et al. 2021), a depth-wise
  3 x 3 convolution over the grid; on a sequence a unidirectional GRU over the token
  embeddings, projected back to D (:class:`GeneratedPosition`).

Neither has a length bound: a distance past ``max_distance`` shares the last bucket, and the
networks run over any length or grid.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from tfam.config import BaseConfig
from tfam.layers.position import PositionScheme, TokenPositions


def relative_position_bucket(
    relative: Tensor, bidirectional: bool = True, num_buckets: int = 32, max_distance: int = 128
) -> Tensor:
    """T5's bucket of each relative position ``relative = j - i`` (key minus query), int64 of
    the same shape, in [0, num_buckets).

    Bidirectional: half the buckets for j > i (the future), half for j <= i. Causal: every
    bucket for the past, j > i falls in bucket 0 with distance 0 (such keys are masked). Of a
    direction's n buckets, distances 0 .. n/2 - 1 get one each; larger ones share
    n/2 + floor(log(d / (n/2)) / log(max_distance / (n/2)) * (n - n/2)), at most n - 1.
    The log is taken in float32, as T5 (Mesh TensorFlow) defines it, so the bucket edges are
    the reference's to the bit.
    """
    buckets = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative > 0).long() * num_buckets
        distance = relative.abs()
    else:
        distance = (-relative).clamp(min=0)  # only the past: -min(j - i, 0)
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    # Small distances are exact; clamping them to max_exact keeps log() finite (unused there).
    ratio = distance.clamp(min=max_exact).float() / max_exact
    large = (
        max_exact
        + (torch.log(ratio) / math.log(max_distance / max_exact) * (num_buckets - max_exact)).long()
    )
    large = large.clamp(max=num_buckets - 1)
    return buckets + torch.where(is_small, distance, large)


class T5RelativeBias(nn.Module):
    """The bias provider of ``position='relative'``: bias[h, i, j] = weight[bucket(j - i), h]
    (T5's ``relative_attention_bias`` and ``compute_bias``), computed once per forward and
    added to the self-attention scores of every block of its stack.

    (q_pos (Lq,), k_pos (Lk,)) int64 -> bias (H, Lq, Lk) in the weight's dtype.
    """

    def __init__(
        self,
        heads: int,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = True,
        std: float = 1.0,
    ) -> None:
        super().__init__()
        if max_distance <= num_buckets // 2:
            raise ValueError(
                f"max_distance={max_distance} is invalid with num_buckets={num_buckets}: the "
                f"log-spaced buckets start past the exact ones, so expected max_distance > "
                f"{num_buckets // 2}"
            )
        self.heads, self.num_buckets, self.max_distance = heads, num_buckets, max_distance
        self.bidirectional = bidirectional
        # (num_buckets, H), as Hugging Face's T5 stores it (an nn.Embedding's weight).
        self.weight = nn.Parameter(torch.empty(num_buckets, heads))
        nn.init.normal_(self.weight, std=std)
        # Every distance at or past max_distance shares its direction's last bucket, so the
        # buckets of -max_distance .. max_distance, computed once, serve any length.
        span = torch.arange(-max_distance, max_distance + 1)
        buckets = relative_position_bucket(span, bidirectional, num_buckets, max_distance)
        self.register_buffer("buckets", buckets, persistent=False)

    def no_weight_decay(self) -> set[str]:
        """A position table, as ``pos_embed``: AdamW's weight decay leaves it alone."""
        return {"weight"}

    def forward(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        far = self.max_distance
        relative = k_pos[None, :] - q_pos[:, None]  # (Lq, Lk): j - i, memory minus query
        index = relative.clamp_(-far, far).add_(far).flatten()  # row of the distance's bucket
        per_distance = self.weight.t()[:, self.buckets]  # (H, 2 * max_distance + 1)
        # index_select: one gather (5x faster than indexing by the (Lq, Lk) tensor, measured)
        return per_distance.index_select(1, index).view(self.heads, *relative.shape)

    def extra_repr(self) -> str:
        return (
            f"heads={self.heads}, num_buckets={self.num_buckets}, "
            f"max_distance={self.max_distance}, bidirectional={self.bidirectional}"
        )


class RelativePosition(PositionScheme):
    """T5's relative position bias (:class:`T5RelativeBias`): a learned (num_buckets, H)
    table per stack, bidirectional in an encoder, past-only in a causal stack (the stack says
    which when it asks for :meth:`score_bias`); nothing added to the tokens."""

    name = "relative"
    title = "relative (T5)"
    acts = "scores"
    domain = "sequence"
    num_buckets = 32
    max_distance = 128

    def score_bias(self, causal: bool = False) -> nn.Module:
        # T5 initialises the table N(0, D^-1/2) (Hugging Face's T5PreTrainedModel).
        return T5RelativeBias(
            self.heads,
            self.num_buckets,
            self.max_distance,
            bidirectional=not causal,
            std=self.dim**-0.5,
        )

    def describe(self) -> str:
        n, far = self.num_buckets, self.max_distance
        return (
            f"add a learned bias weight[bucket(j - i), h] to every self-attention score (T5: "
            f"{n} x H table, one per stack, shared by its blocks; in an encoder {n // 2} "
            f"buckets per direction, distances below {n // 4} exact; in a causal stack all "
            f"{n} for the past, below {n // 2} exact; then log-spaced up to {far}, farther "
            "ones share the last bucket): nothing added to the tokens, no length bound"
        )


class GeneratedPosition(PositionScheme):
    """Positions generated by a small network from the tokens, added to them.

    On a patch grid (built with ``grid=``): CPVT's position encoding generator, a depth-wise
    3 x 3 convolution (zero padding 1, with bias) over the patch tokens laid on their grid,
    PEG(X) = X + DWConv(X); the prefix tokens ([CLS]) get nothing. CPVT puts it after the
    first block; here it acts at the embedding, where every scheme adds its positions (CPVT's
    ablation places it there too, "position 0"). Any grid: the convolution does not depend on
    the grid's size.

    On a sequence (built with ``length=``): a one-layer unidirectional GRU (D -> D) over the
    token embeddings, its states projected back to D (no bias): X + W GRU(X). Token i's value
    reads tokens 0..i only (causal families never read the future); a left-padded row runs
    from its first real token, so it equals the row unpadded. It cannot continue from a KV
    cache (``incremental = False``: ``generate`` re-encodes at every step) and refuses tokens
    after cached ones.

    Its parameters are this module's (``position.*`` in the family's state dict): the
    family holds the scheme as a child module; nothing is passed as ``table``.
    """

    name = "generated"
    title = "generated (GRU / CPVT)"
    acts = "tokens"
    domain = "any"
    incremental = False

    def __init__(self, config: BaseConfig, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        d = self.dim
        # Built for the shape the family gives; a stack builds the scheme with neither (it
        # asks only for Q/K transforms and score biases) and gets no network.
        self.conv: nn.Conv2d | None = None
        self.gru: nn.GRU | None = None
        self.proj: nn.Linear | None = None
        if self.grid is not None:
            self.conv = nn.Conv2d(d, d, kernel_size=3, padding=1, groups=d)
        elif self.length > 0:
            self.gru = nn.GRU(d, d, batch_first=True)
            self.proj = nn.Linear(d, d, bias=False)

    def add(
        self, x: Tensor, where: TokenPositions | tuple[int, int], table: Tensor | None = None
    ) -> Tensor:
        """x (B, L, D) -> x + the network's output (B, L, D); ``where``: the tokens'
        :class:`TokenPositions` (sequence) or the patch grid (gh, gw) after the prefix."""
        if isinstance(where, TokenPositions):
            return x + self.recurrent(x, where)
        return x + self.convolved(x, where)

    def convolved(self, x: Tensor, grid: tuple[int, int]) -> Tensor:
        """x (B, prefix + gh*gw, D) -> DWConv over the patch grid (B, prefix + gh*gw, D),
        zeros at the prefix tokens."""
        if self.conv is None:
            raise ValueError(
                "position='generated' was built for a sequence: a patch grid needs the scheme "
                "built with grid="
            )
        b, n, d = x.shape
        gh, gw = grid
        if n != self.prefix + gh * gw:
            raise ValueError(
                f"x has {n} tokens; expected prefix + gh*gw = {self.prefix} + {gh}*{gw}"
            )
        patches = x[:, self.prefix :].transpose(1, 2).reshape(b, d, gh, gw)  # (B, D, gh, gw)
        out = self.conv(patches).flatten(2).transpose(1, 2)  # (B, gh*gw, D)
        return F.pad(out, (0, 0, self.prefix, 0))

    def recurrent(self, x: Tensor, where: TokenPositions) -> Tensor:
        """x (B, L, D) -> W GRU(x) (B, L, D), each row from its first real token."""
        if self.gru is None or self.proj is None:
            raise ValueError(
                "position='generated' was built for a patch grid: a sequence needs the scheme "
                "built with length="
            )
        if where.offset:
            raise ValueError(
                f"position='generated' cannot continue after {where.offset} cached tokens: its "
                "GRU reads every token before; encode the whole sequence (generate does so for "
                "this scheme)"
            )
        if where.rows is None:
            states, _ = self.gru(x)
            return self.proj(states)
        # Left padding: row r's real tokens are its last n_r (positions count from the first
        # real one, so the last token's position is n_r - 1). Roll them to the front, run the
        # GRU over n_r steps only, roll back; padding positions get zeros.
        b, n, _ = x.shape
        real = where.rows[:, -1] + 1  # (B,)
        pad = (n - real)[:, None]
        steps = torch.arange(n, device=x.device)[None, :]
        front = ((steps + pad) % n)[..., None].expand_as(x)
        packed = pack_padded_sequence(
            x.gather(1, front), real.cpu(), batch_first=True, enforce_sorted=False
        )
        states, _ = pad_packed_sequence(self.gru(packed)[0], batch_first=True, total_length=n)
        back = ((steps - pad) % n)[..., None].expand(b, n, states.shape[-1])
        return self.proj(states.gather(1, back))

    def describe(self) -> str:
        if self.grid is not None:
            return (
                "add a depth-wise 3x3 convolution of the patch tokens on their grid (CPVT's "
                f"position encoding generator, at the embedding: {9 * self.dim + self.dim} "
                "parameters, any grid)" + ("; the prefix tokens get none" if self.prefix else "")
            )
        return (
            "add W GRU(X): a unidirectional GRU (D -> D) over the token embeddings, projected "
            "back to D; each token's value reads the tokens before it only, no length bound"
        )


__all__ = [
    "GeneratedPosition",
    "RelativePosition",
    "T5RelativeBias",
    "relative_position_bucket",
]
