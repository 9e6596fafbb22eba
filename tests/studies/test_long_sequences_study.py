"""The long-sequences study's own parts: the lab profile it builds from its settings, the
majority-class baseline, and the scores each kernel holds (its cost())."""

import pytest

from tfam.bench.long_sequences import Profile as LabProfile
from tfam.studies import STUDIES
from tfam.studies.long_sequences import lab_profile, majority_baseline, scores_held_mb

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("profile", ["tiny", "quick", "full"])
def test_every_profile_builds_the_lab_profile(profile):
    s = STUDIES["long-sequences"].profiles[profile].settings
    p = lab_profile(profile, s)
    assert isinstance(p, LabProfile) and p.name == profile
    assert p.listops_lengths == tuple(s["listops_lengths"]) and p.steps == s["steps"]
    assert p.dim % p.heads == 0


def test_majority_baseline_counts_the_test_labels():
    p = lab_profile("tiny", STUDIES["long-sequences"].profiles["tiny"].settings)
    b = majority_baseline("pathfinder32", p)
    # pathfinder's labels alternate draw by draw: an even test set is exactly balanced
    assert b == {"test_size": p.test_size, "classes": 2, "majority": 0.5}


def test_scores_held_follow_each_kernels_cost():
    p = LabProfile("t", steps=1, batch_size=2, train_size=2, test_size=2,
                   listops_lengths=(8, 16), text_length=8, image_size=16, dim=16, heads=2)  # fmt: skip
    length = 257
    dense = scores_held_mb("math", length, p)
    assert dense == pytest.approx(length * length * 4 * 2 * 2 / 1e6)
    # a window of ~L/16 keys each side holds far fewer scores than the L x L matrix
    assert scores_held_mb("local", length, p) < dense / 4
    assert scores_held_mb("chunked", length, p) <= dense


def test_the_report_says_where_the_gpu_rows_stand(monkeypatch):
    import torch

    from tfam.studies.long_sequences import _gpu_rows

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "were not run: no GPU is visible to torch on this machine" in _gpu_rows("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert "rerun with `--profile full --device cuda`" in _gpu_rows("cpu")
    assert _gpu_rows("cuda") == "These are the GPU rows."
