"""The speech encoder's memory grows linearly with the frames under ``local`` attention.

Two views of one tiny encoder (``tfam.create_model("speech", ...)``), at T and 2T frames:
what its kernels say they hold (``cost().score_elements`` of every layer at the frames after
subsampling) and what forward and backward really make (the largest tensor any operation
creates). Under ``local`` both double with the frames; under dense ``math`` the scores
quadruple. Peak resident memory at full size is ``benchmarks/bench_speech_memory.py``'s.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

import tfam
from tfam.layers.attention import MultiHeadAttention

TINY = {"dim": 16, "heads": 2, "depth": 2, "ffn_dim": 32, "n_mels": 8, "head": "none"}
WINDOW = 4


class _Largest(TorchDispatchMode):
    """Records the largest tensor any operation makes (forward and backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def _model(attention: str) -> tfam.models.TfamModel:
    options = {"window": WINDOW} if attention == "local" else {}
    torch.manual_seed(0)
    return tfam.create_model("speech", attention=attention, attention_options=options, **TINY)


def _score_elements(model: torch.nn.Module, frames: int) -> int:
    """Score entries the encoder's kernels hold, summed over layers and heads."""
    length = int(model.config.output_lengths(torch.tensor(frames)))
    layers = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    return sum(m.heads * m.kernel.cost(length, length, m.head_dim).score_elements for m in layers)


def _largest(model: torch.nn.Module, frames: int) -> int:
    features = torch.randn(1, frames, TINY["n_mels"], generator=torch.Generator().manual_seed(1))
    mask = torch.ones(1, frames, dtype=torch.bool)
    mask[:, -7:] = False  # padding frames: the key mask reaches every kernel
    with _Largest() as spy:
        model(features, attention_mask=mask).square().mean().backward()
    return spy.largest


@pytest.mark.parametrize(("attention", "low", "high"), [("local", 1.9, 2.1), ("math", 3.9, 4.1)])
def test_score_memory_grows_linearly_under_local_and_quadratically_dense(attention, low, high):
    model = _model(attention)
    assert model.config.subsampling == 2
    t = 1024  # input frames: 512 after subsampling, 32 local blocks of 16 queries
    ratio = _score_elements(model, 2 * t) / _score_elements(model, t)
    assert low <= ratio <= high, ratio
    measured = _largest(model, 2 * t) / _largest(model, t)
    assert low <= measured <= high, measured


def test_local_holds_a_fraction_of_dense_at_the_same_length():
    t = 1024
    local, dense = _model("local"), _model("math")
    assert _score_elements(local, t) * 8 < _score_elements(dense, t)
    assert _largest(local, t) * 8 < _largest(dense, t)
