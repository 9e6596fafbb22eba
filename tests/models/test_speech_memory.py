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

import tfam
from tfam.layers.attention import MultiHeadAttention

TINY = {"dim": 16, "heads": 2, "depth": 2, "ffn_dim": 32, "n_mels": 8, "head": "none"}
WINDOW = 4


def _model(attention: str) -> tfam.models.TfamModel:
    options = {"window": WINDOW} if attention == "local" else {}
    torch.manual_seed(0)
    return tfam.create_model("speech", attention=attention, attention_options=options, **TINY)


def _score_elements(model: torch.nn.Module, frames: int) -> int:
    """Score entries the encoder's kernels hold, summed over layers and heads."""
    length = int(model.config.output_lengths(torch.tensor(frames)))
    layers = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    return sum(m.heads * m.kernel.cost(length, length, m.head_dim).score_elements for m in layers)


def _largest(largest_tensor, model: torch.nn.Module, frames: int) -> int:
    features = torch.randn(1, frames, TINY["n_mels"], generator=torch.Generator().manual_seed(1))
    mask = torch.ones(1, frames, dtype=torch.bool)
    mask[:, -7:] = False  # padding frames: the key mask reaches every kernel
    with largest_tensor() as spy:
        model(features, attention_mask=mask).square().mean().backward()
    return spy.largest


@pytest.mark.parametrize(("attention", "low", "high"), [("local", 1.9, 2.1), ("math", 3.9, 4.1)])
def test_score_memory_grows_linearly_under_local_and_quadratically_dense(
    largest_tensor, attention, low, high
):
    model = _model(attention)
    assert model.config.subsampling == 2
    t = 1024  # input frames: 512 after subsampling, 32 local blocks of 16 queries
    ratio = _score_elements(model, 2 * t) / _score_elements(model, t)
    assert low <= ratio <= high, ratio
    measured = _largest(largest_tensor, model, 2 * t) / _largest(largest_tensor, model, t)
    assert low <= measured <= high, measured


def test_local_holds_a_fraction_of_dense_at_the_same_length(largest_tensor):
    t = 1024
    local, dense = _model("local"), _model("math")
    assert _score_elements(local, t) * 8 < _score_elements(dense, t)
    assert _largest(largest_tensor, local, t) * 8 < _largest(largest_tensor, dense, t)
