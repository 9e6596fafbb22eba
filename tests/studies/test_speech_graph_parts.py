"""The parts of the speech-truncated and graph-edges studies: long utterances joined from real
ones, the synthetic frames of the tiny profile, the share of pairs a graph mask lets attend,
the cost sweep's slope, and train_recipe's overrides."""

import pytest
import torch

from tfam.bench.speech_memory import slope
from tfam.data.graphs.graph import Graph
from tfam.studies.graph_edges import attended_share
from tfam.studies.speech_truncated import join_utterances, synthetic_frames


def test_join_utterances_keeps_every_frame_and_label_in_order():
    data = synthetic_frames(7, n_mels=4, classes=3, seed=0, length=10)
    long = join_utterances(data, 25)
    assert [int(n) for n in long.lengths] == [30, 30, 10]  # >= 25 each but the last
    assert torch.equal(torch.cat(long.features), torch.cat(data.features))
    assert torch.equal(torch.cat(long.labels), torch.cat(data.labels))


def test_synthetic_frames_are_their_class_mean_plus_noise():
    data = synthetic_frames(40, n_mels=6, classes=3, seed=1, length=24)
    x, y = torch.cat(data.features), torch.cat(data.labels)
    means = torch.stack([x[y == k].mean(0) for k in range(3)])
    # Nearest class mean recovers most frames: the labels follow the frames.
    pred = torch.cdist(x, means).argmin(1)
    assert (pred == y).float().mean() > 0.8
    assert data.info.num_labels == 3 and data.info.n_mels == 6


@pytest.mark.parametrize("n", [3, 5, 8])
def test_attended_share_of_a_ring_is_3_over_n(n):
    ring = torch.arange(n)
    edges = torch.stack([torch.cat([ring, (ring + 1) % n]), torch.cat([(ring + 1) % n, ring])])
    g = Graph(
        nodes=torch.eye(n), edge_index=edges, edge_types=torch.zeros(2 * n, dtype=torch.int64)
    )
    assert attended_share([g]) == pytest.approx(3 / n)


def test_slope_of_a_power_law():
    assert slope([(n, 3.0 * n**1.5) for n in (100, 400, 1600)]) == pytest.approx(1.5)
    assert slope([(100, 1.0)]) is None


def test_train_recipe_applies_overrides_and_train_values():
    from tfam.data import get_dataset
    from tfam.data.sources.karate import load_karate
    from tfam.training.recipes import train_recipe

    train, test = load_karate("train"), load_karate("test")
    run = train_recipe(get_dataset("karate"), train, test, seed=0,
                       overrides={"graph_mask": False, "dim": 8},
                       train={"epochs": 2, "num_workers": 0})  # fmt: skip
    assert run.model.config.graph_mask is False and run.model.config.dim == 8
    assert run.steps == 2 and 0.0 <= run.metrics(test)["acc"] <= 1.0
