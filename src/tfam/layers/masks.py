"""Boolean attention masks, True = may attend, broadcastable to (B, H, Lq, Lk).

Combine masks with ``&``; :func:`combine` does it and keeps None meaning "every key".
"""

from __future__ import annotations

import torch
from torch import Tensor


def causal_mask(lq: int, lk: int | None = None, device: torch.device | str | None = None) -> Tensor:
    """(Lq, Lk): query i may see key j <= i + (Lk - Lq).

    Bottom-right aligned: with a KV cache the Lq new queries are the last Lq positions of the
    Lk keys, so the last query sees every key. With Lq > Lk the first Lq - Lk rows are empty.
    """
    lk = lq if lk is None else lk
    i = torch.arange(lq, device=device)[:, None]
    j = torch.arange(lk, device=device)[None, :]
    return j <= i + (lk - lq)


def padding_mask(attention_mask: Tensor) -> Tensor:
    """Key padding: (B, Lk) with True (or 1) = real token -> (B, 1, 1, Lk) bool."""
    if attention_mask.ndim != 2:
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)}; expected (B, L) with "
            "True or 1 = real token"
        )
    return attention_mask.bool()[:, None, None, :]


def pad_token_mask(ids: Tensor, pad_token_id: int | None) -> Tensor | None:
    """(B, L) token ids -> (B, 1, 1, L) key mask hiding ``pad_token_id``; None if no padding."""
    if pad_token_id is None:
        return None
    keep = ids != pad_token_id
    return None if bool(keep.all()) else keep[:, None, None, :]


def window_mask(
    lq: int,
    lk: int | None = None,
    window: int = 1,
    causal: bool = False,
    device: torch.device | str | None = None,
) -> Tensor:
    """(Lq, Lk) local attention: query i sees keys within ``window`` positions of its own
    (|i' - j| <= window, i' = i + Lk - Lq, bottom-right aligned like :func:`causal_mask`);
    with ``causal`` only the ``window`` keys before it and itself."""
    lk = lq if lk is None else lk
    if not isinstance(window, int) or window < 0:
        raise ValueError(f"window={window!r} is invalid: expected an int >= 0")
    i = torch.arange(lq, device=device)[:, None] + (lk - lq)
    j = torch.arange(lk, device=device)[None, :]
    near = (i - j).abs() <= window
    return near & (j <= i) if causal else near


def combine(*masks: Tensor | None) -> Tensor | None:
    """AND of the given masks (broadcasting); None entries mean "every key"."""
    out = None
    for m in masks:
        if m is None:
            continue
        out = m if out is None else out & m
    return out


__all__ = ["causal_mask", "combine", "pad_token_mask", "padding_mask", "window_mask"]
