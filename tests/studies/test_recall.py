"""The delayed-recall generator of attention-vs-rnn: its answers, by hand and in general."""

import pytest
import torch

from tfam.studies.recurrence import IGNORE, delayed_recall


def test_answers_are_the_token_delay_steps_back():
    g = torch.Generator().manual_seed(0)
    x, y = delayed_recall(4, 10, 3, 5, g)
    assert x.shape == y.shape == (4, 10)
    assert int(x.min()) >= 0 and int(x.max()) < 5
    assert (y[:, :3] == IGNORE).all()
    for t in range(3, 10):
        assert torch.equal(y[:, t], x[:, t - 3])


def test_scored_positions_are_length_minus_delay():
    g = torch.Generator().manual_seed(1)
    for delay in (1, 2, 7):
        x, y = delayed_recall(3, 8, delay, 10, g)
        assert int((y != IGNORE).sum()) == 3 * (8 - delay)
        assert y[:, delay:].tolist() == x[:, : 8 - delay].tolist()


def test_seeded_and_checked():
    a = delayed_recall(2, 6, 1, 4, torch.Generator().manual_seed(3))
    b = delayed_recall(2, 6, 1, 4, torch.Generator().manual_seed(3))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    for bad in (0, 6):
        with pytest.raises(ValueError, match="delay"):
            delayed_recall(2, 6, bad, 4, torch.Generator())
