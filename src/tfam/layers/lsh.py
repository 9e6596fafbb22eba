"""The ``lsh`` kernel: Reformer's hashing attention (Kitaev, Kaiser & Levskaya 2020), O(n log n).

Softmax attention is dominated by the keys nearest a query, so each query attends only to the
keys that an angular locality-sensitive hash puts in its bucket:

    h(x) = argmax([x R ; -x R])        R: (Dh, b/2) random rotation, b buckets   (Reformer §2)

Queries and keys are sorted by (bucket, position) and the sorted sequence is cut into chunks; a
query attends to the keys of its bucket within its own chunk and the previous one (the first
chunk has none before it), so the scores computed are rounds x n x 2 chunk, never (Lq, Lk).
Several ``rounds`` of hashing, each with its own rotation, are combined by their logsumexp
weights (Reformer eq. 4 and appendix A): round r gives o_r and z_r = logsumexp of its scores,

    o = sum_r exp(z_r - logsumexp_r z_r) o_r.

A pair found by several rounds has its score lowered by log N_ij (N_ij: the rounds in which
query i and key j share a bucket and a window), so the result is exactly softmax attention over
the union of the pairs any round found: ``lsh_attention`` equals ``math_attention`` under the
mask :func:`lsh_pattern` (tests/layers/test_lsh.py checks it, forward and gradients).

**Causal** masks the keys after the query's position and, unlike Reformer, narrows the window
to the C sorted places ending at the query (C items per chunk: a sliding window, inside the
chunk and the previous one). With fixed chunks, a later token that changes bucket shifts every
chunk boundary after it in the sort and so changes which earlier keys an earlier query sees:
its output then depends on the future. Between a query and an earlier key of its bucket the
sort holds only tokens of that bucket between their positions, so the sliding window depends
on the past alone (the tests redraw later tokens and check it).

**Memory and time.** The chunks run in groups of about ``_GROUP_SCORES`` score entries, each
under activation checkpointing when gradients are wanted: backward recomputes a group's
scores, so what autograd keeps is linear in the length, and a group's working set fits a
CPU's cache, so time grows with the work (O(n chunk) for the chunks, O(n log n) for the sort).

**Queries and keys.** Reformer ties the keys to the queries (k_j = q_j / |q_j|, one shared
projection), so that a token and its key always share a bucket and a chunk. A kernel here
receives the model's own q and k (separate projections), so by default both are hashed with
the **same** rotations and sorted **together** (keys before queries at equal positions): a
chunk holds 2 x ``chunk`` items, queries and keys, and a query meets the keys of its bucket
nearest it in the sort, however the two populations spread over the buckets. The kernel then
approximates the function ``math`` computes from the same q, k, v (W_K keeps its gradient, a
trained model can switch to it, cross-attention and Lq != Lk work), which is what the kernel
contract can hold it to. A query whose bucket has no key in its window gets no key that round;
if no round finds one, its output is zero (as a fully masked row). ``shared_qk=True`` is the
paper's tied version: k is ignored and replaced by q / |q|, the sort is over tokens (a chunk
holds ``chunk`` tokens), self-attention only (Lq = Lk, no cache), and a token does not attend
to itself unless no other key is available to it (Reformer §2, "shared-QK"), the rule applied
after the rounds are combined: a row with no other key takes its own value (when its key
is not masked).

**Defaults.** ``buckets=None`` picks, per length, the largest power of two <= 2 x the number of
chunks (the Reformer implementations' choice: buckets of about chunk/2 tokens), and 1 (no
hashing) when everything fits in one chunk: then lsh equals math up to rounding, as in the
kernel contract's tiny shapes. More than 64 buckets are hashed as a product of two rotations
(b = b1 x b2, bucket = h1 x b2 + h2, as trax and transformers do for a list of bucket counts),
so hashing costs O(n sqrt(b) Dh), not O(n b Dh). The rotations are drawn from a ``torch.Generator`` seeded by ``seed``, in
float64 on the CPU, round by round: fixed for the kernel, equal across calls, devices and
dtypes, and the first r rounds of a kernel with more rounds are the rounds of one with r.

    q: (B, H, Lq, Dh)   k, v: (B, H, Lk, Dh)   (Lq = Lk with shared_qk)
    mask: bool key-padding mask broadcastable to (B, H, 1, Lk), True = may attend
    is_causal: query i sees keys j <= i + (Lk - Lq) (bottom-right aligned)
    -> out (B, H, Lq, Dh_v)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from tfam.config import config_error
from tfam.layers.kernels import AttentionCost, AttentionKernel, _check_mask


@dataclasses.dataclass(frozen=True)
class LSHOptions:
    """``buckets``: hash buckets, None = per length (see the module), 1 = no hashing, or an
    even int; ``rounds``: hashing rounds (n_hashes); ``chunk``: queries per chunk of the sort
    (2 x chunk items, queries and keys; ``chunk`` tokens with ``shared_qk``); ``seed``: the
    rotations' generator seed; ``shared_qk``: Reformer's tied keys k = q / |q|."""

    buckets: int | None = None
    rounds: int = 1
    chunk: int = 64
    seed: int = 0
    shared_qk: bool = False


# Above this many buckets, hash with two rotations whose bucket counts multiply.
_FACTORISE_ABOVE = 64


def default_buckets(n_chunks: int) -> int:
    """Buckets for ``n_chunks`` chunks of the sort: 1 (no hashing) for one chunk, else the
    largest power of two <= 2 n_chunks (average bucket: half a chunk)."""
    if n_chunks <= 1:
        return 1
    return 1 << ((2 * n_chunks).bit_length() - 1)


def bucket_factors(buckets: int) -> tuple[int, ...]:
    """``buckets`` as the bucket counts of the rotations that hash it: itself up to 64, else
    two even factors as near sqrt(buckets) as exist (itself when none do)."""
    if buckets <= _FACTORISE_ABOVE:
        return (buckets,)
    for small in range(math.isqrt(buckets), 1, -1):
        if small % 2 == 0 and buckets % small == 0 and (buckets // small) % 2 == 0:
            return (buckets // small, small)
    return (buckets,)


def draw_rotations(head_dim: int, buckets: int, rounds: int, seed: int) -> list[list[Tensor]]:
    """Per round, the rotations (Dh, f/2) of each factor f of ``buckets``: standard-normal
    entries (a random rotation up to scale, which argmax ignores), float64, drawn in order from
    a generator seeded by ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    factors = bucket_factors(buckets)
    return [
        [torch.randn(head_dim, f // 2, generator=gen, dtype=torch.float64) for f in factors]
        for _ in range(rounds)
    ]


def lsh_hash(x: Tensor, rotations: list[Tensor]) -> Tensor:
    """Buckets (..., N) int64 of the vectors x (..., N, Dh): h(x) = argmax([xR; -xR]), and for
    factorised buckets h = h1 * b2 + h2."""
    bucket = torch.zeros(x.shape[:-1], dtype=torch.long, device=x.device)
    for rot in rotations:
        xr = torch.matmul(x, rot.to(device=x.device, dtype=x.dtype))  # (..., N, f/2)
        h = torch.cat([xr, -xr], dim=-1).argmax(dim=-1)  # h(x) = argmax([xR; -xR])
        bucket = bucket * (2 * rot.shape[1]) + h
    return bucket


@dataclasses.dataclass
class _Plan:
    """What the hashing decided: the items (queries and keys, or tokens) and, per round, their
    sort. ``perms[r]`` (B, H, N): item at each sorted place; ``ranks[r]``: its inverse;
    ``buckets[r]`` (B, H, N): each item's bucket; ``chunk``: items per chunk; ``n_chunks``."""

    n: int
    chunk: int
    n_chunks: int
    n_buckets: int
    perms: list[Tensor]
    ranks: list[Tensor]
    buckets: list[Tensor]


def _items(q: Tensor, k: Tensor, shared_qk: bool) -> tuple[Tensor, Tensor, Tensor]:
    """The items the sort orders: hashed vectors (B, H, N, Dh), positions (N,) in the keys'
    frame (query i at i + Lk - Lq) and the kind (N,) bool, True = query. Separate q and k:
    N = Lq + Lk, queries first; shared: N = L tokens, each both."""
    lq, lk = q.shape[-2], k.shape[-2]
    if shared_qk:
        return (
            q,
            torch.arange(lq, device=q.device),
            torch.ones(lq, dtype=torch.bool, device=q.device),
        )
    pos = torch.cat([torch.arange(lq) + (lk - lq), torch.arange(lk)]).to(q.device)
    kind = torch.cat([torch.ones(lq, dtype=torch.bool), torch.zeros(lk, dtype=torch.bool)])
    return torch.cat([q, k], dim=-2), pos, kind.to(q.device)


def _plan(
    q: Tensor, k: Tensor, buckets: int | None, rounds: int, chunk: int, seed: int, shared_qk: bool
) -> _Plan:
    x, pos, kind = _items(q, k, shared_qk)
    n = x.shape[-2]
    size = min(chunk if shared_qk else 2 * chunk, n)
    n_chunks = -(-n // size)
    n_buckets = default_buckets(n_chunks) if buckets is None else buckets
    rotations = draw_rotations(q.shape[-1], n_buckets, rounds, seed) if n_buckets > 1 else None
    # Sort key: (bucket, position, kind); keys before queries at one position, so causal
    # self-attention finds its own key in the same or the previous chunk.
    lq, lk = q.shape[-2], k.shape[-2]
    shift = max(0, lq - lk)  # positions start at min(0, Lk - Lq); known here, no device sync
    order, span = pos + shift, lk + shift
    if not shared_qk:
        order, span = 2 * order + kind.long(), 2 * span
    perms, ranks, bucket_list = [], [], []
    with torch.no_grad():  # the hash is piecewise constant: no gradient flows through it
        for r in range(rounds):
            if rotations is None:
                bucket = torch.zeros(x.shape[:-1], dtype=torch.long, device=x.device)
            else:
                bucket = lsh_hash(x.detach(), rotations[r])
            perm = torch.argsort(bucket * span + order, dim=-1)
            places = torch.arange(n, device=x.device).expand_as(perm)
            rank = torch.empty_like(perm).scatter_(-1, perm, places)
            perms.append(perm)
            ranks.append(rank)
            bucket_list.append(bucket)
    return _Plan(n, size, n_chunks, n_buckets, perms, ranks, bucket_list)


def _key_keep(mask: Tensor | None, b: int, h: int, lk: int) -> Tensor | None:
    """A key-padding mask broadcastable to (B, H, 1, Lk) as (B, H, Lk), or None."""
    if mask is None:
        return None
    m = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
    return m.expand(b, h, 1, lk)[:, :, 0]


def _near(place_q: Tensor, place_k: Tensor, size: int, is_causal: bool) -> Tensor:
    """Whether a key at sorted place ``place_k`` is in the window of a query at ``place_q``
    (broadcast): Reformer's chunk or the previous one; with causal, the ``size`` places
    ending at the query (a sliding window, so later tokens cannot move it)."""
    if is_causal:
        back = place_q - place_k
        return (back >= 0) & (back < size)
    back = torch.div(place_q, size, rounding_mode="floor") - torch.div(
        place_k, size, rounding_mode="floor"
    )
    return (back == 0) | (back == 1)


def lsh_pattern(
    q: Tensor,
    k: Tensor,
    is_causal: bool = False,
    buckets: int | None = None,
    rounds: int = 1,
    chunk: int = 64,
    seed: int = 0,
    shared_qk: bool = False,
) -> Tensor:
    """(B, H, Lq, Lk) bool: the (query, key) pairs some round puts in one bucket and one
    window (:func:`_near`), computed densely from the same sort, before any mask, causal or
    shared-QK rule. For tests and inspection: ``lsh_attention`` equals ``math_attention``
    under this pattern ANDed with the masks."""
    lq = q.shape[-2]
    plan = _plan(q, k, buckets, rounds, chunk, seed, shared_qk)
    kq, kk = slice(0, lq), slice(0, lq) if shared_qk else slice(lq, plan.n)  # item ranges
    found = None
    for rank, bucket in zip(plan.ranks, plan.buckets):
        near = _near(rank[..., kq, None], rank[..., None, kk], plan.chunk, is_causal)
        same = (bucket[..., kq, None] == bucket[..., None, kk]) & near
        found = same if found is None else found | same
    return found


def _blocks(t: Tensor, n_chunks: int, size: int) -> Tensor:
    """Sorted items (B, H, N, D) padded with zeros to whole chunks: (B, H, nC, C, D)."""
    pad = n_chunks * size - t.shape[2]
    if pad:
        t = torch.cat([t, t.new_zeros(*t.shape[:2], pad, t.shape[3])], dim=2)
    return t.reshape(*t.shape[:2], n_chunks, size, t.shape[3])


def _previous(t: Tensor) -> Tensor:
    """Each chunk's previous chunk (B, H, nC, C, D): zeros before the first."""
    return torch.cat([torch.zeros_like(t[:, :, :1]), t[:, :, :-1]], dim=2)


def _sorted(t: Tensor, perm: Tensor) -> Tensor:
    """Items (B, H, N, D) in the sorted order ``perm`` (B, H, N)."""
    return t.gather(2, perm[..., None].expand(*perm.shape, t.shape[-1]))


# Item facts the chunks read (int64 channels of one tensor, gathered with each sort); then per
# round r: the item's bucket and its place in round r's sort.
_IS_QUERY, _IS_KEY, _POS, _ITEM, _ROUNDS = 0, 1, 2, 3, 4
# Score entries (B x H x chunks x C x W) one group of chunks holds, forward and backward: small
# enough to stay in a CPU's cache (time then grows with length as the work does); larger on a
# GPU, where each group costs kernel launches.
_GROUP_SCORES = {"cpu": 1 << 18}
_GROUP_SCORES_OTHER = 1 << 24


def _attend_chunks(
    qc: Tensor,
    kc: Tensor,
    vc: Tensor,
    mc: Tensor,
    kp: Tensor | None,
    vp: Tensor | None,
    mp: Tensor | None,
    c0: int,
    r: int,
    rounds: int,
    is_causal: bool,
    shared_qk: bool,
) -> tuple[Tensor, Tensor]:
    """Round ``r``'s attention in chunks c0.. of the sort: queries qc (B, H, g, C, Dh) over the
    window of their chunk (kc, vc) after the previous one (kp, vp; None with a single chunk);
    mc/mp the items' facts (B, H, g, C, M). -> (out (B, H, g, C, Dh_v), lse (B, H, g, C))."""
    size = qc.shape[3]
    kw = kc if kp is None else torch.cat([kp, kc], dim=3)  # (B, H, g, W, Dh)
    vw = vc if vp is None else torch.cat([vp, vc], dim=3)
    mw = mc if mp is None else torch.cat([mp, mc], dim=3)
    mq, mk = mc[..., :, None, :], mw[..., None, :, :]  # (B, H, g, C, 1, M), (B, H, g, 1, W, M)
    bucket = _ROUNDS + 2 * r
    # Same bucket, a query row and a (kept) key column.
    allowed = (mq[..., _IS_QUERY] & mk[..., _IS_KEY]).bool() & (mq[..., bucket] == mk[..., bucket])
    if is_causal:
        allowed = allowed & (mk[..., _POS] <= mq[..., _POS])
        # Only the C sorted places ending at the query: fixed chunk boundaries would move when
        # a later token changes bucket, and with them the keys an earlier query sees.
        g = qc.shape[2]
        place = (c0 + torch.arange(g, device=qc.device))[:, None] * size + torch.arange(
            size, device=qc.device
        )  # (g, C)
        before = place if kp is None else torch.cat([place - size, place], dim=1)  # (g, W)
        allowed = allowed & _near(place[:, :, None], before[:, None, :], size, True)
    if shared_qk:  # a token's own key is left out (given back after the rounds if alone)
        allowed = allowed & (mk[..., _ITEM] != mq[..., _ITEM])
    scores = torch.matmul(qc, kw.transpose(-2, -1)).to(torch.promote_types(qc.dtype, torch.float32))
    if rounds > 1:
        # N_ij: rounds that put i and j in one bucket and one window; exp(s - log N) counts a
        # pair found by several rounds once (Reformer appendix A).
        found = torch.zeros_like(scores)
        for other in range(rounds):
            b_, p_ = _ROUNDS + 2 * other, _ROUNDS + 2 * other + 1
            near = _near(mq[..., p_], mk[..., p_], size, is_causal)
            found += (mq[..., b_] == mk[..., b_]) & near
        scores = scores - found.clamp(min=1).log()
    scores = scores.masked_fill(~allowed, float("-inf"))
    # exp(s - m), m the row's max (0 for a row with no key, whose weights are then all 0); m
    # cancels out of both results, so it carries no gradient.
    top = scores.amax(dim=-1, keepdim=True).detach()
    weights = torch.exp(scores - top.masked_fill(torch.isneginf(top), 0.0))
    total = weights.sum(dim=-1, keepdim=True)
    alive = total > 0
    safe = torch.where(alive, total, 1.0)
    out = torch.matmul(weights.to(vw.dtype), vw) / safe.to(vw.dtype)
    lse = torch.where(alive, top + torch.log(safe), float("-inf"))  # log sum_j exp(s_ij)
    return out, lse.squeeze(-1)


def lsh_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    buckets: int | None = None,
    rounds: int = 1,
    chunk: int = 64,
    seed: int = 0,
    shared_qk: bool = False,
) -> Tensor:
    """Reformer's LSH attention; shapes and options as in the module. -> (B, H, Lq, Dh_v).

    The chunks run in groups, each under activation checkpointing when gradients are wanted:
    a group's scores are recomputed in backward, so memory is linear in the length and a
    group's working set stays small (``_GROUP_SCORES``)."""
    _check_mask(mask)
    b, h, lq, dh = q.shape
    lk, dv = k.shape[-2], v.shape[-1]
    if shared_qk and lq != lk:
        raise config_error(
            "attention_options.shared_qk",
            True,
            f"tied keys are the queries: self-attention only (Lq = Lk), got Lq={lq}, Lk={lk}",
        )
    scale = 1.0 / math.sqrt(dh) if scale is None else scale
    plan = _plan(q, k, buckets, rounds, chunk, seed, shared_qk)
    keep = _key_keep(mask, b, h, lk)
    _, pos, kind = _items(q, k, shared_qk)
    n, nc, size = plan.n, plan.n_chunks, plan.chunk
    # Items' query vectors (scaled first, as math does), key vectors, values and key flags.
    if shared_qk:
        xq, xk, xv = q * scale, F.normalize(q, dim=-1), v  # Reformer: k_j = q_j / |q_j|
        is_key = torch.ones(b, h, n, dtype=torch.bool, device=q.device)
    else:
        xq = torch.cat([q * scale, q.new_zeros(b, h, lk, dh)], dim=2)
        xk = torch.cat([k.new_zeros(b, h, lq, dh), k], dim=2)
        xv = torch.cat([v.new_zeros(b, h, lq, dv), v], dim=2)
        is_key = (~kind).expand(b, h, n)
    if keep is not None:
        is_key = is_key & (keep if shared_qk else torch.cat([keep.new_ones(b, h, lq), keep], 2))
    facts = [kind.expand(b, h, n), is_key, pos.expand(b, h, n), torch.arange(n, device=q.device)
             .expand(b, h, n)]  # fmt: skip
    for bucket, rank in zip(plan.buckets, plan.ranks):
        facts += [bucket, rank]
    facts = torch.stack([f.long() for f in facts], dim=-1)  # (B, H, N, M)
    window = 2 * size if nc > 1 else size
    per_chunk = b * h * size * window
    group = max(1, _GROUP_SCORES.get(q.device.type, _GROUP_SCORES_OTHER) // per_chunk)
    checkpointing = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    outs, lses = [], []
    for r in range(rounds):
        perm = plan.perms[r]
        blocks = [_blocks(_sorted(t, perm), nc, size) for t in (xq, xk, xv, facts)]
        if nc > 1:
            blocks += [_previous(t) for t in blocks[1:]]
        # Split once (a slice per group would cost its backward a zero tensor of full size).
        pieces = list(zip(*(torch.split(t, group, dim=2) for t in blocks)))
        out_r, lse_r = [], []
        for i, args in enumerate(pieces):
            if nc == 1:
                args = (*args, None, None, None)
            opts = (i * group, r, rounds, is_causal, shared_qk)
            if checkpointing:
                o, z = checkpoint(_attend_chunks, *args, *opts, use_reentrant=False)
            else:
                o, z = _attend_chunks(*args, *opts)
            out_r.append(o)
            lse_r.append(z)
        # Back to item order; the first Lq items are the queries.
        rank = plan.ranks[r]
        out = torch.cat(out_r, dim=2).reshape(b, h, nc * size, dv)
        out = out.gather(2, rank[..., None].expand(b, h, n, dv))
        lse = torch.cat(lse_r, dim=2).reshape(b, h, nc * size).gather(2, rank)
        outs.append(out[:, :, :lq])
        lses.append(lse[:, :, :lq])
    if rounds == 1:
        out, dead = outs[0], torch.isneginf(lses[0])[..., None]
    else:
        # o = sum_r exp(z_r - logsumexp z) o_r, written so that rows no round reached stay
        # zero, with finite gradients (no logsumexp of -inf alone).
        z = torch.stack(lses, dim=-1)  # (B, H, Lq, R)
        top = z.amax(dim=-1, keepdim=True).detach()
        e = torch.exp(z - top.masked_fill(torch.isneginf(top), 0.0))
        total = e.sum(dim=-1, keepdim=True)
        dead = total == 0
        w = (e / total.masked_fill(dead, 1.0)).to(v.dtype)
        out = (torch.stack(outs, dim=-1) * w[..., None, :]).sum(dim=-1)
    if shared_qk:
        # Reformer's rule: a token attends to itself only when no other key is available.
        self_ok = dead if keep is None else dead & keep[..., None]
        out = torch.where(self_ok, v, out)
    return out


class LSHKernel(AttentionKernel):
    """Reformer's hashing attention (:func:`lsh_attention`): O(n log n) time, O(n chunk)
    memory; queries and keys hashed with shared rotations, or tied keys with ``shared_qk``."""

    name = "lsh"
    Options = LSHOptions
    exactness = "approximate"
    # Measured in the kernel contract's setting (standard-normal q, k, v, float64, at most 12
    # items): with the default options every item falls in one chunk and one bucket, so lsh is
    # math up to rounding (measured max 8.9e-16 over 20 seeds of every scenario it takes); the
    # bound leaves rounding room and nothing more. Beyond one
    # chunk the error depends on the data, not on rounding: test_lsh.py checks lsh against
    # math under its own pattern (lsh_pattern) instead.
    error_bound = 1e-12
    refuses = {
        "mask": "a per-query mask is (Lq, Lk) in memory, which hashing exists to avoid "
        "(key-padding masks are taken)",
        "bias": "an (Lq, Lk) bias is what hashing avoids making",
        "cache": "each call hashes and sorts every key again, so a decoding step would cost "
        "O(n log n) where dense attention costs O(n)",
        "need_weights": "the (Lq, Lk) weights are what hashing avoids making",
        "dropout": "not implemented",
    }

    @classmethod
    def check_option(cls, name: str, value: Any) -> None:
        is_int = isinstance(value, int) and not isinstance(value, bool)
        if (
            name == "buckets"
            and value is not None
            and not (is_int and (value == 1 or (value >= 2 and value % 2 == 0)))
        ):
            raise config_error(
                "attention_options.buckets",
                value,
                "expected null (per length), 1 (no hashing) or an even int >= 2",
            )
        if name in ("rounds", "chunk") and not (is_int and value >= 1):
            raise config_error(f"attention_options.{name}", value, "expected an int >= 1")
        if name == "seed" and not (is_int and value >= 0):
            raise config_error("attention_options.seed", value, "expected an int >= 0")
        if name == "shared_qk" and not isinstance(value, bool):
            raise config_error("attention_options.shared_qk", value, "expected true or false")

    def cost(self, lq: int, lk: int, head_dim: int, is_causal: bool = False) -> AttentionCost:
        """Flops: per round, the chunk windows' scores (n/C chunks x C x W, W = 2C past one
        chunk) and the hashing; causal masks inside the windows, so it computes as many.
        Scores held: one group of chunks of one round at a time (the CPU's group size: a GPU's
        groups are larger); what grows with length in memory is the O(n Dh) sorted copies."""
        o = self.options
        n = lq if o.shared_qk else lq + lk
        size = min(o.chunk if o.shared_qk else 2 * o.chunk, n)
        n_chunks = -(-n // size)
        buckets = default_buckets(n_chunks) if o.buckets is None else o.buckets
        window = 2 * size if n_chunks > 1 else size
        scores = o.rounds * n_chunks * size * window
        hashing = 0 if buckets == 1 else o.rounds * n * head_dim * sum(bucket_factors(buckets))
        group = min(n_chunks, max(1, _GROUP_SCORES["cpu"] // (size * window)))
        return AttentionCost(
            flops=4.0 * scores * head_dim + hashing, score_elements=group * size * window
        )

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None,
        bias: Tensor | None,
        is_causal: bool,
        dropout_p: float,
        scale: float | None,
        need_weights: bool,
    ) -> tuple[Tensor, Tensor | None]:
        o = self.options
        out = lsh_attention(
            q, k, v, mask, is_causal, scale, o.buckets, o.rounds, o.chunk, o.seed, o.shared_qk
        )
        return out, None


__all__ = [
    "LSHKernel",
    "LSHOptions",
    "bucket_factors",
    "default_buckets",
    "draw_rotations",
    "lsh_attention",
    "lsh_hash",
    "lsh_pattern",
]
