"""The image studies' own parts: stratified subsets, the step-budget stream, and the exact
claim of attention-vs-cnn (local attention's dependencies are a 3 x 3 convolution's)."""

import pytest
import torch

from tfam.data.sources.images import ImageDataset
from tfam.studies.cnn_attention import dependencies
from tfam.studies.images import stratified, stream

pytestmark = pytest.mark.usefixtures("one_thread")


def toy(n: int = 100, k: int = 4) -> ImageDataset:
    """n 2x2 images whose first pixel is the image's index (mod 256); label = index % k."""
    images = torch.zeros(n, 1, 2, 2, dtype=torch.uint8)
    images[:, 0, 0, 0] = torch.arange(n) % 256
    return ImageDataset(images, torch.arange(n) % k, [str(c) for c in range(k)], mean=0.0, std=1.0)


def ids(ds: ImageDataset) -> list[int]:
    return ds.images[:, 0, 0, 0].tolist()


@pytest.mark.parametrize("n", [4, 10, 23])
def test_stratified_is_balanced_distinct_and_seeded(n: int) -> None:
    ds = toy()
    a = stratified(ds, n, seed=1)
    counts = a.class_counts()
    assert len(a) == n and int(counts.max() - counts.min()) <= 1
    assert len(set(ids(a))) == n  # no image twice
    assert all(i % 4 == y for i, y in zip(ids(a), a.labels.tolist()))  # labels follow images
    assert ids(stratified(ds, n, seed=1)) == ids(a)
    assert ids(stratified(ds, n, seed=2)) != ids(a)


def test_stream_is_whole_passes_then_a_cut_one() -> None:
    ds = toy(10)
    s = stream(ds, 25, seed=0)
    order = ids(s)
    assert len(order) == 25
    for p in range(2):  # two whole passes: each a permutation of the 10 images
        assert sorted(order[10 * p : 10 * p + 10]) == list(range(10))
    assert len(set(order[20:])) == 5  # the cut third pass repeats nothing
    assert ids(stream(toy(100), 30, seed=0)) != list(range(30))  # larger: a shuffled part
    assert len(set(ids(stream(toy(100), 30, seed=0)))) == 30


@pytest.mark.parametrize("depth", [1, 2])
def test_local_attention_reads_what_3x3_convolutions_read(depth: int) -> None:
    local, conv = dependencies("vit-local", depth), dependencies("conv", depth)
    assert torch.equal(local, conv)
    side = 2 * depth + 1  # the centre token's receptive field: side x side tokens
    assert int(local[24].sum()) == side * side
    assert bool(dependencies("vit", 1).all())  # global attention reads every token
