"""The parts of the `heads` and `no-positions` studies that the tiny run does not check: the
permutation test itself, and the stand-in data of the tiny profiles."""

import pytest
import torch

from tfam.studies.no_positions import permutation_gap
from tfam.studies.seqtasks import SyntheticFrames, _spread, tagging_data

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("scheme,equivariant", [("none", True), ("sinusoidal", False),
                                                 ("rope", False), ("alibi", False)])  # fmt: skip
def test_encoder_without_positions_is_permutation_equivariant(scheme, equivariant):
    got = permutation_gap(scheme, length=8, seed=1)
    if equivariant:
        assert got["gap"] < 1e-12  # float64 rounding of a sum in another order
    else:
        assert got["gap"] > 1e-4 * got["scale"]


def test_synthetic_frames_label_runs_of_frames():
    ds = SyntheticFrames(4, 30, 6, 3, seed=0)
    feats, labels = ds[0]
    assert feats.shape == (30, 6) and labels.shape == (30,)
    assert labels.min() >= 0 and labels.max() < 3
    # Segments of 4-12 frames: never more than ceil(30 / 4) + 1 label changes.
    assert int((labels[1:] != labels[:-1]).sum()) <= 8


def test_synthetic_tags_need_the_previous_token():
    train, _ = tagging_data("synthetic", 5, 2)
    for ids, labels in train.items:
        assert labels[0] == -100
        assert torch.equal(labels[1:], ids[:-1] % 5)


def test_spread_covers_the_ends():
    assert _spread(10, 3) == [0, 4, 9] or _spread(10, 3) == [0, 5, 9]
    assert _spread(3, 10) == [0, 1, 2]
