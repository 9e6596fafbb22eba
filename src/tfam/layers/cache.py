"""Key/value caches for incremental decoding.

A decoder that emits one token at a time would recompute every earlier key and value at each
step; a cache keeps them. Self-attention appends the new positions to a preallocated
:class:`KVCache`; cross-attention's keys and values come from the encoder output, which does not
change while decoding, so :class:`CrossKV` computes them once per source.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor


class KVCache:
    """Keys and values of one self-attention layer, preallocated as (B, H, max_len, Dh) on the
    first update (which fixes B, H, Dh, dtype and device). ``length`` positions are filled."""

    static = False

    def __init__(self, max_len: int) -> None:
        if not isinstance(max_len, int) or max_len < 1:
            raise ValueError(f"max_len={max_len!r} is invalid: expected an int >= 1")
        self.max_len = max_len
        self.length = 0
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append k, v (B, H, n, Dh) -> all keys and values so far, (B, H, length, Dh) each."""
        n = k.shape[-2]
        if self.k is None:
            b, h, _, dh = k.shape
            self.k = k.new_empty(b, h, self.max_len, dh)
            self.v = v.new_empty(b, h, self.max_len, v.shape[-1])
        assert self.v is not None
        if self.length + n > self.max_len:
            raise ValueError(
                f"the KV cache holds max_len={self.max_len} positions; {self.length} are filled "
                f"and {n} more were given (make the cache longer or generate fewer tokens)"
            )
        self.k[:, :, self.length : self.length + n] = k
        self.v[:, :, self.length : self.length + n] = v
        self.length += n
        return self.k[:, :, : self.length], self.v[:, :, : self.length]

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (beam search: follow each surviving beam's parent)."""
        if self.k is not None:
            self.k = self.k.index_select(0, index)
            self.v = self.v.index_select(0, index)  # type: ignore[union-attr]


class CrossKV:
    """Cross-attention keys and values of one layer, (B, H, Ls, Dh), set once per source."""

    static = True

    def __init__(self) -> None:
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    @property
    def filled(self) -> bool:
        return self.k is not None

    def set(self, k: Tensor, v: Tensor) -> None:
        self.k, self.v = k, v

    def reorder(self, index: Tensor) -> None:
        if self.k is not None:
            self.k = self.k.index_select(0, index)
            self.v = self.v.index_select(0, index)  # type: ignore[union-attr]


class LayerCache:
    """The caches of one block: its self-attention and, in a decoder block, its cross-attention.
    ``self_attn``: the cache the block's kernel reads (``kernel.new_cache(max_len)``: linear
    attention keeps running sums); a :class:`KVCache` by default. Whatever it is, it has
    ``length`` (positions seen), ``static = False`` and ``reorder(index)``."""

    def __init__(self, max_len: int, cross: bool, self_attn: Any = None) -> None:
        self.self_attn = KVCache(max_len) if self_attn is None else self_attn
        self.cross_attn = CrossKV() if cross else None

    def reorder(self, index: Tensor) -> None:
        self.self_attn.reorder(index)
        if self.cross_attn is not None:
            self.cross_attn.reorder(index)


class StackCache:
    """One :class:`LayerCache` per block of a stack; ``position`` = tokens seen so far.
    ``self_caches``: one self-attention cache per block (its kernel's), KVCaches by default."""

    def __init__(
        self, depth: int, max_len: int, cross: bool = False, self_caches: list[Any] | None = None
    ) -> None:
        if self_caches is not None and len(self_caches) != depth:
            raise ValueError(
                f"self_caches has {len(self_caches)} caches; expected one per block ({depth})"
            )
        self.max_len = max_len
        caches = self_caches if self_caches is not None else [None] * depth
        self.layers = [LayerCache(max_len, cross, c) for c in caches]

    @property
    def position(self) -> int:
        return self.layers[0].self_attn.length if self.layers else 0

    def __getitem__(self, i: int) -> LayerCache:
        return self.layers[i]

    def __len__(self) -> int:
        return len(self.layers)

    def reorder(self, index: Tensor) -> None:
        for layer in self.layers:
            layer.reorder(index)


__all__ = ["CrossKV", "KVCache", "LayerCache", "StackCache"]
