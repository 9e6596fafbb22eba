"""The speech encoder's utterance head: mean and statistics pooling over the real frames."""

from __future__ import annotations

import pytest
import torch

import tfam
from tfam.models.speech import SpeechConfig


def model(pool: str) -> tfam.models.Speech:
    torch.manual_seed(0)
    config = SpeechConfig(
        dim=16, depth=1, heads=2, ffn_dim=32, n_mels=8, subsampling=2, head="utterance",
        pool=pool, num_labels=5,
    )  # fmt: skip
    return tfam.models.Speech(config).eval()


@pytest.mark.parametrize("pool", ["mean", "stats"])
def test_pooling_equals_a_hand_computation_over_the_real_frames(pool: str) -> None:
    m = model(pool)
    features = torch.randn(2, 12, 8)
    mask = torch.ones(2, 12, dtype=torch.bool)
    mask[1, 7:] = False
    features[~mask] = 0.0
    with torch.no_grad():
        hidden = m.forward_features(features, mask)
        got = m.pool_frames(hidden)
        for b, frames in enumerate((6, 4)):  # ceil(12 / 2), ceil(7 / 2) real output frames
            h = hidden[b, :frames].double()
            want = h.mean(0)
            if pool == "stats":
                std = (h.var(0, unbiased=False) + 1e-5).sqrt()
                want = torch.cat([want, std])
            torch.testing.assert_close(got[b].double(), want, rtol=1e-5, atol=1e-6)
        assert got.shape == (2, 32 if pool == "stats" else 16)


def test_a_padded_batch_equals_its_utterances_one_by_one() -> None:
    m = model("stats")
    features = torch.randn(2, 12, 8)
    mask = torch.ones(2, 12, dtype=torch.bool)
    mask[1, 5:] = False
    features[~mask] = 0.0
    with torch.no_grad():
        batch = m(features, attention_mask=mask)
        alone = m(features[1:, :5], attention_mask=mask[1:, :5])
    torch.testing.assert_close(batch[1:], alone, rtol=1e-5, atol=1e-5)


def test_a_one_frame_utterance_has_finite_gradients_under_stats() -> None:
    m = model("stats").train()
    features = torch.randn(1, 1, 8)  # one output frame: every channel's deviation is 0
    m(features).sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)


def test_an_unknown_pool_is_one_line() -> None:
    with pytest.raises(ValueError, match="pool"):
        SpeechConfig(head="utterance", pool="max")


def test_explain_shows_the_statistics_pool_and_counts_the_wider_head() -> None:
    table = tfam.explain("speech_digits_speaker", pool="stats")
    names = [row.step for row in table.rows]
    assert "statistics pool" in names
    assert (
        table.total_params
        == tfam.create_model("speech_digits_speaker", pool="stats").num_parameters()
    )
    assert table.total_params - tfam.explain("speech_digits_speaker").total_params == 144 * 24
