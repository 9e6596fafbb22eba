"""The ``performer`` kernel: FAVOR+ (Choromanski et al. 2021), softmax attention approximated by
positive orthogonal random features.

    exp(q . k) = E_w[ phi(q) . phi(k) ],   phi(x) = exp(W x - |x|^2 / 2) / sqrt(M)   (Lemma 1)

W (M, Dh) holds ``features`` = M rows, orthogonal within blocks of Dh (a Gaussian matrix's QR),
each row rescaled by the norm of an independent Gaussian vector (chi with Dh degrees), so each
row is marginally N(0, I) and the rows of a block are exactly orthogonal (section 4, ORF). The
rows are drawn once, from a ``torch.Generator`` seeded by the option ``seed`` (so the config
says what ran and two builds compute the same function), when the kernel first sees a head
width, and kept as a buffer (not saved: the seed rebuilds it). Every layer built from one
config draws the same W.

Attention then runs as :func:`~tfam.layers.linear_attention.kernelized_attention`: the two
products phi(K)^T V and phi(Q) (...) without causal, prefix sums in chunks with it; decoding
keeps the running sums S and z (O(1) per token). The error against softmax falls as M grows
(about 1/sqrt(M)).

**Stability without reading other positions.** exp(W x) overflows for large x. Both stabilisers
here are exact (they cancel between the numerator and the denominator) and read no key but the
one they scale, so a causal query never depends on a later key, to the bit:

- a key's features are phi_r(k) * exp(-|w_r|^2 / 2) = exp(-|w_r - k|^2 / 2) <= 1: a constant
  per feature r that depends on W only, never on the keys;
- a query's features are multiplied by exp(|w_r|^2 / 2) to compensate, and by exp(-max_r(...))
  over its own M logits: a per-query constant, which cancels in out_i = num_i / den_i.

The 1/sqrt(M) and exp(-|q|^2 / 2) factors are per-query constants too, and are left out.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import Tensor

from tfam.config import config_error
from tfam.layers.kernels import check_int_option
from tfam.layers.linear_attention import KernelizedKernel


def orthogonal_features(m: int, d: int, generator: torch.Generator) -> Tensor:
    """W (m, d) in float64: ceil(m / d) blocks of d orthonormal rows (QR of a Gaussian d x d),
    truncated to m rows, each rescaled by an independent chi(d) norm (Choromanski et al. 2021,
    section 4: orthogonal random features with Gaussian-like marginals)."""
    blocks = []
    for _ in range(math.ceil(m / d)):
        gauss = torch.randn(d, d, generator=generator, dtype=torch.float64)
        ortho, r = torch.linalg.qr(gauss)  # columns orthonormal
        # Signs of R's diagonal onto Q's columns: then Q is Haar-distributed (LAPACK's Q alone
        # is not, and its rows have a non-zero mean, which biases the estimate of exp(q . k)).
        ortho = ortho * torch.sign(torch.diagonal(r)).unsqueeze(0)
        blocks.append(ortho.T)
    w = torch.cat(blocks)[:m]
    norms = torch.randn(m, d, generator=generator, dtype=torch.float64).norm(dim=1)
    return w * norms.unsqueeze(1)


@dataclasses.dataclass(frozen=True)
class PerformerOptions:
    # M, the random features per head: the error against softmax falls about as 1/sqrt(M); the
    # cost is O(L * M * Dh). 256 ~ Dh log Dh at Dh = 64, the paper's choice.
    features: int = 256
    # Seeds the generator that draws W once per head width: same seed, same kernel.
    seed: int = 0
    # Positions per chunk of the causal prefix sums.
    chunk: int = 64


class PerformerKernel(KernelizedKernel):
    """FAVOR+ attention (positive orthogonal random features), O(L) in time and memory."""

    name = "performer"
    Options = PerformerOptions
    # Measured (python benchmarks/bench_linear.py --bound): the largest |out - math| at the
    # default 256 features (seed 0) over 3000 draws of each of the kernel contract's calls
    # (standard-normal q, k, v, float64, Dh = 4, up to 6 keys) was 2.65, the mean 0.058: the
    # positive features' variance grows as exp(|q + k|^2), so rare draws are far off while the
    # mean error is small and falls with M (tests/layers/test_performer.py). As for `linear`, outputs are convex combinations of v,
    # so the bound says little more than v's spread. 3.5 leaves a margin.
    error_bound = 3.5

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        # W (M, Dh), drawn when the head width is first seen; not saved (the seed rebuilds it).
        self.register_buffer("projection", None, persistent=False)

    @classmethod
    def check_option(cls, name: str, value: Any) -> None:
        if name in ("features", "chunk"):
            check_int_option(name, value)
        elif name == "seed" and (isinstance(value, bool) or not isinstance(value, int)):
            raise config_error("attention_options.seed", value, "expected an integer")

    def feature_count(self, head_dim: int) -> int:
        return self.options.features

    def random_features(self, head_dim: int, device: torch.device, dtype: torch.dtype) -> Tensor:
        """W (M, Dh), drawn from ``seed`` on the CPU in float64 the first time (or when the
        head width changes), so every device and dtype gets the same rows."""
        w = self.projection
        # A meta stand-in (explain's trace) holds no rows: a real call draws them again.
        if w is None or w.shape[-1] != head_dim or (w.is_meta and device.type != "meta"):
            # Kept for later calls: never an inference tensor, which training could not save.
            with torch.inference_mode(False):
                gen = torch.Generator().manual_seed(self.options.seed)
                w = orthogonal_features(self.options.features, head_dim, gen)
                w = w.to(device=device, dtype=torch.promote_types(dtype, torch.float32))
            self.projection = w
        return w.to(device=device, dtype=dtype)

    def feature_maps(self, q: Tensor, k: Tensor, scale: float | None) -> tuple[Tensor, Tensor]:
        """phi(q) and phi(k) (B, H, L, M), stabilised (module docstring)."""
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        root = math.sqrt(scale)  # exp(q . k * scale) = exp((root q) . (root k))
        w = self.random_features(q.shape[-1], q.device, q.dtype)
        half_w2 = 0.5 * w.square().sum(-1)  # |w_r|^2 / 2, (M,)
        q, k = q * root, k * root
        # Keys: w_r . k - |k|^2 / 2 - |w_r|^2 / 2 = -|w_r - k|^2 / 2 <= 0 (a constant per r).
        k_logits = torch.matmul(k, w.T) - 0.5 * k.square().sum(-1, keepdim=True) - half_w2
        # Queries: w_r . q + |w_r|^2 / 2, minus its own max over r (a per-query constant).
        q_logits = torch.matmul(q, w.T) + half_w2
        q_logits = q_logits - q_logits.amax(-1, keepdim=True).detach()
        return torch.exp(q_logits), torch.exp(k_logits)


__all__ = ["PerformerKernel", "PerformerOptions", "orthogonal_features"]
