"""embeddings' parts: the unrelated pairs, cosines, and skip-gram learning co-occurrence."""

import pytest
import torch

from tfam.studies.embeddings import RELATED, cosine_table, skipgram, unrelated_pairs

pytestmark = pytest.mark.usefixtures("one_thread")


def test_unrelated_pairs_never_repeat_a_related_pair():
    unrelated = unrelated_pairs(RELATED)
    assert len(unrelated) == len(RELATED) and not set(unrelated) & set(RELATED)
    assert [a for a, _ in unrelated] == [a for a, _ in RELATED]


def test_one_hot_cosines_are_zero_and_a_vector_with_itself_is_one():
    eye = torch.eye(4)
    index = {w: i for i, w in enumerate("abcd")}
    assert cosine_table(eye, index, [("a", "b"), ("c", "d")]) == [0.0, 0.0]
    assert cosine_table(eye, index, [("a", "a")]) == pytest.approx([1.0])


def test_skipgram_puts_words_of_the_same_contexts_together():
    # Two worlds that never mix: {x1, x2} around "p" words, {y1, y2} around "q" words.
    gen = torch.Generator().manual_seed(0)
    words = []
    for _ in range(3000):
        if torch.rand(1, generator=gen) < 0.5:
            words += ["p1", "x1" if torch.rand(1, generator=gen) < 0.5 else "x2", "p2"]
        else:
            words += ["q1", "y1" if torch.rand(1, generator=gen) < 0.5 else "y2", "q2"]
    s = dict(min_count=1, sg_dim=8, window=1, negatives=3, sg_batch=64, sg_steps=100,
             sg_lr=0.05, subsample=1.0)  # fmt: skip
    vecs, vocab, facts = skipgram(words, s, seed=0)
    index = {w: i for i, w in enumerate(vocab)}
    same, across = cosine_table(vecs, index, [("x1", "x2"), ("x1", "y1")])
    assert same > across + 0.2, (same, across)
    assert facts["loss"] < 2.0
