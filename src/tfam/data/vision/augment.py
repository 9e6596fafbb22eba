"""Batch augmentation on normalised images: random crop after padding, random horizontal flip,
random erasing (Zhong et al. 2017), and Mixup (Zhang et al. 2018) or CutMix (Yun et al. 2019),
which also mix the labels; DeiT's recipe uses all of them.

A handful of whole-batch tensor ops, no loop over images; every random draw comes from the generator
passed in, so a seeded generator gives the same batch every time.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

__all__ = ["BatchAugment"]

# The augmentation each dataset is trained with lives in its catalog entry (tfam.data.catalog,
# ``default_augment``); this module knows no dataset.


@functools.lru_cache(maxsize=8)
def _unshifted_starts(b: int, c: int, h: int, hp: int, wp: int, device: torch.device) -> Tensor:
    """(B, C, H) flat offset of padded row i of plane (b, c): ((b*C + c)*Hp + i)*Wp. Read-only."""
    planes = torch.arange(b * c, device=device).view(b, c, 1)
    return (planes * hp + torch.arange(h, device=device)) * wp


# Random erasing's rectangle: a share of the image's area drawn uniformly from this range, and
# an aspect ratio (height / width) drawn log-uniformly from this one (the paper's and timm's).
ERASE_AREA = (0.02, 1 / 3)
ERASE_ASPECT = (0.3, 1 / 0.3)
# With both Mixup and CutMix on, the share of batches that get CutMix (timm's switch_prob, DeiT's).
CUTMIX_SHARE = 0.5


class BatchAugment:
    """Pad by ``padding`` pixels on each side, crop back at a random offset, flip with p = 0.5,
    and with probability ``erase`` replace one random rectangle of each image by standard
    normal noise (random erasing: ERASE_AREA of the area, aspect ERASE_ASPECT; noise, as
    timm's ``mode="pixel"`` that DeiT trains with, is what the normalised images look like to
    the model: mean 0, variance 1). A rectangle taller or wider than the image is clipped to
    it.

    ``mixup`` and ``cutmix`` (Beta(alpha, alpha) parameters; 0 = off) mix each batch with itself
    reversed, as timm's batch mode does: image i meets image B-1-i, and one lam ~ Beta(alpha,
    alpha) serves the whole batch. Mixup blends, x = lam x_i + (1 - lam) x_{B-1-i}; CutMix
    pastes a box of about (1 - lam) of the area from the partner and sets lam to the share the
    image kept. With both on, a batch gets CutMix with probability CUTMIX_SHARE. Mixing changes
    the labels, so :meth:`__call__` leaves it out and :meth:`mix` does it: the task weighs the
    loss of the two labels by lam and 1 - lam (``ImageClassification.augment``).

    The padding takes the value of a black pixel, ``fill`` (scalar or one per channel; for data
    normalised as ``(x - mean) / std`` black is ``-mean / std``, :attr:`ImageDataset.black`).
    ``ImageDataset.get_batch(idx, augment=aug, generator=g)`` passes its own black.
    ``padding=0, flip=False, erase=0`` is the identity.
    """

    def __init__(
        self,
        padding: int = 0,
        flip: bool = False,
        fill: float | Sequence[float] | Tensor = 0.0,
        erase: float = 0.0,
        mixup: float = 0.0,
        cutmix: float = 0.0,
    ) -> None:
        if isinstance(padding, bool) or not isinstance(padding, int) or padding < 0:
            raise ValueError(f"padding={padding!r} is invalid: expected pixels >= 0 (an int)")
        if not isinstance(flip, bool):
            raise ValueError(f"flip must be True or False, got {flip!r}")
        if isinstance(erase, bool) or not isinstance(erase, (int, float)) or not 0 <= erase <= 1:
            raise ValueError(f"erase={erase!r} is invalid: expected a probability in [0, 1]")
        for name, alpha in (("mixup", mixup), ("cutmix", cutmix)):
            if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha >= 0:
                raise ValueError(
                    f"{name}={alpha!r} is invalid: expected Beta's alpha >= 0 (0 = off; DeiT's "
                    "recipe: mixup 0.8, cutmix 1.0)"
                )
        self.padding = padding
        self.flip = flip
        self.erase = float(erase)
        self.mixup, self.cutmix = float(mixup), float(cutmix)
        self.fill = torch.as_tensor(fill, dtype=torch.float32).reshape(-1)

    @property
    def is_identity(self) -> bool:
        """Whether :meth:`__call__` leaves images as they are (mixing is :meth:`mix`'s)."""
        return self.padding == 0 and not self.flip and self.erase == 0

    @property
    def mixes(self) -> bool:
        """Whether :meth:`mix` mixes batches (Mixup or CutMix on)."""
        return self.mixup > 0 or self.cutmix > 0

    @staticmethod
    def max_padding(image_size: int | Sequence[int]) -> int:
        """The largest padding allowed for images of ``image_size`` (int or (height, width)):
        half the smaller side, so a crop always keeps at least half the image."""
        h, w = (image_size, image_size) if isinstance(image_size, int) else image_size
        return min(int(h), int(w)) // 2

    def check_image_size(self, image_size: int | Sequence[int]) -> None:
        """ValueError when the padding is too large for images of ``image_size``: a crop would
        be mostly (or only) padding."""
        limit = self.max_padding(image_size)
        if self.padding > limit:
            h, w = (image_size, image_size) if isinstance(image_size, int) else image_size
            raise ValueError(
                f"padding={self.padding!r} is invalid for {h}x{w} images: expected pixels in "
                f"0..{limit} (at most half the smaller side)"
            )

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
        if self.erase:
            out = self._erase(out, generator, draw_device)
        return out

    def _erase(
        self, images: Tensor, generator: torch.Generator | None, draw: torch.device
    ) -> Tensor:
        """One rectangle of noise in each image chosen with probability ``erase``: whole-batch
        masks, no loop over images."""
        b, c, h, w = images.shape
        u = torch.rand(5, b, generator=generator, device=draw, dtype=torch.float64)
        chosen = u[0] < self.erase
        area = (ERASE_AREA[0] + u[1] * (ERASE_AREA[1] - ERASE_AREA[0])) * h * w
        lo, hi = math.log(ERASE_ASPECT[0]), math.log(ERASE_ASPECT[1])
        aspect = torch.exp(lo + u[2] * (hi - lo))
        eh = (area * aspect).sqrt().round().clamp(1, h)
        ew = (area / aspect).sqrt().round().clamp(1, w)
        top = (u[3] * (h - eh + 1)).floor()  # every placement inside the image equally likely
        left = (u[4] * (w - ew + 1)).floor()
        noise = torch.randn(images.shape, generator=generator, device=draw, dtype=images.dtype)
        rows = torch.arange(h, device=draw, dtype=torch.float64)
        cols = torch.arange(w, device=draw, dtype=torch.float64)
        in_rows = (rows >= top[:, None]) & (rows < (top + eh)[:, None])  # (B, H)
        in_cols = (cols >= left[:, None]) & (cols < (left + ew)[:, None])  # (B, W)
        mask = (in_rows[:, :, None] & in_cols[:, None, :] & chosen[:, None, None])[:, None]
        device = images.device
        return torch.where(mask.to(device), noise.to(device), images)

    def mix(
        self, images: Tensor, generator: torch.Generator | None = None
    ) -> tuple[Tensor, Tensor]:
        """Mixup or CutMix of a batch with itself reversed: images (B, C, H, W) -> (mixed
        images (B, C, H, W), lam (B,) float32: the weight of each image's own label; its
        partner, image B-1-i, gets 1 - lam). Without mixing: the images and lam = 1."""
        b, _, h, w = images.shape
        lam_t = torch.ones(b, dtype=torch.float32, device=images.device)
        if not self.mixes:
            return images, lam_t
        draw_device = generator.device if generator is not None else torch.device("cpu")
        u = torch.rand(3, generator=generator, device=draw_device, dtype=torch.float64).tolist()
        use_cutmix = self.cutmix > 0 and (self.mixup == 0 or u[0] < CUTMIX_SHARE)
        alpha = self.cutmix if use_cutmix else self.mixup
        # Beta(alpha, alpha) by numpy, seeded from the generator: torch's Beta takes no generator.
        seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=draw_device))
        lam = float(np.random.default_rng(seed).beta(alpha, alpha))
        partner = images.flip(0)
        if not use_cutmix:
            return lam * images + (1 - lam) * partner, lam_t.fill_(lam)
        # A box of about (1 - lam) of the area, centred anywhere, clipped to the image (timm's
        # rand_bbox); lam becomes the share of the image that stays its own.
        cut = math.sqrt(1 - lam)
        ch, cw = int(h * cut), int(w * cut)
        cy, cx = int(u[1] * h), int(u[2] * w)
        y0, y1 = max(cy - ch // 2, 0), min(cy + ch // 2, h)
        x0, x1 = max(cx - cw // 2, 0), min(cx + cw // 2, w)
        out = images.clone()
        out[:, :, y0:y1, x0:x1] = partner[:, :, y0:y1, x0:x1]
        return out, lam_t.fill_(1 - (y1 - y0) * (x1 - x0) / (h * w))

    def describe(self) -> str:
        """What it does, in a few words: 'pad 1, flip, erase 0.25, mixup 0.8' (or 'none')."""
        parts = [f"pad {self.padding}"] if self.padding else []
        parts += ["flip"] if self.flip else []
        parts += [f"erase {self.erase:g}"] if self.erase else []
        parts += [f"mixup {self.mixup:g}"] if self.mixup else []
        parts += [f"cutmix {self.cutmix:g}"] if self.cutmix else []
        return ", ".join(parts) or "none"

    def __repr__(self) -> str:
        extra = f", erase={self.erase:g}" if self.erase else ""
        extra += f", mixup={self.mixup:g}" if self.mixup else ""
        extra += f", cutmix={self.cutmix:g}" if self.cutmix else ""
        return f"BatchAugment(padding={self.padding}, flip={self.flip}{extra})"
