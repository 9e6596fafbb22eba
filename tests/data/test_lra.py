"""The Long Range Arena-style data sets: ListOps' answers and rules, the Pathfinder-like
labels, the byte-level passages, determinism, the catalog entries."""

from __future__ import annotations

import random
from collections import deque

import numpy as np
import pytest

from tfam.data.catalog import get_dataset
from tfam.data.sources.listops import (
    LISTOPS_VOCAB,
    generate_expression,
    listops_expressions,
    listops_value,
    load_listops,
)
from tfam.data.sources.pathfinder import load_pathfinder, pathfinder_images, pathfinder_sample


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("[MAX 2 9 [MIN 4 7 ] 0 ]", 9),
        ("[MIN 4 7 ]", 4),
        ("[MED 3 1 2 ]", 2),
        ("[MED 1 2 3 4 ]", 2),  # even count: (2 + 3) / 2 = 2.5, truncated as LRA's int(np.median)
        ("[MED 0 9 ]", 4),
        ("[MED 8 9 ]", 8),
        ("[SM 9 8 7 ]", 4),  # 24 mod 10
        ("[SM 5 5 ]", 0),
        ("[MIN [MAX 1 5 ] [SM 3 4 ] ]", 5),
        ("[SM [MED 1 2 3 4 ] [MAX 9 [MIN 8 3 ] ] 0 ]", 1),  # 2 + 9 + 0 = 11
        ("7", 7),
    ],
)
def test_listops_value_of_hand_expressions(expression: str, value: int) -> None:
    assert listops_value(expression) == value


def test_listops_median_is_lra_numpy_median_truncated() -> None:
    rng = random.Random(3)
    for _ in range(200):
        values = [rng.randrange(10) for _ in range(rng.randint(2, 10))]
        text = "[MED " + " ".join(map(str, values)) + " ]"
        assert listops_value(text) == int(np.median(values))


@pytest.mark.parametrize("bad", ["[MAX 1 2", "[MAX ]", "1 2", "[MAX 1 x ]", "]"])
def test_listops_value_refuses_malformed(bad: str) -> None:
    with pytest.raises(ValueError):
        listops_value(bad)


def _depth_and_arity(tokens: list[str]) -> tuple[int, int, int]:
    """(deepest node, counting the root as 1; fewest and most arguments of an operator)."""
    stack: list[int] = []
    deepest, fewest, most = 1, 99, 0
    for tok in tokens:
        if tok.startswith("["):
            if stack:
                stack[-1] += 1
            stack.append(0)
            deepest = max(deepest, len(stack))
        elif tok == "]":
            n = stack.pop()
            fewest, most = min(fewest, n), max(most, n)
        else:
            if stack:
                stack[-1] += 1
            deepest = max(deepest, len(stack) + 1)
    return deepest, fewest, most


def test_listops_generator_follows_the_rules() -> None:
    pairs = listops_expressions(60, seed=1, min_length=20, max_length=120)
    assert len({t for t, _ in pairs}) == 60  # distinct
    for text, value in pairs:
        tokens = text.split()
        assert 20 < len(tokens) < 120
        assert set(tokens) <= set(LISTOPS_VOCAB[2:])
        assert listops_value(tokens) == value  # generator and evaluator agree
        deepest, fewest, most = _depth_and_arity(tokens)
        assert deepest <= 10 and 2 <= fewest and most <= 10
    # max_depth binds: at depth 2 every argument is a value
    for _ in range(20):
        tokens, value = generate_expression(random.Random(_), max_depth=2)
        assert _depth_and_arity(tokens)[0] <= 2
        assert listops_value(tokens) == value


def test_listops_is_seeded() -> None:
    a = listops_expressions(5, seed=7, min_length=10, max_length=60)
    assert a == listops_expressions(5, seed=7, min_length=10, max_length=60)
    assert a != listops_expressions(5, seed=8, min_length=10, max_length=60)
    ds = load_listops("val", size=6, min_length=10, max_length=60)
    assert ds.max_length <= 60 and ds.vocab_size == len(LISTOPS_VOCAB)
    ids, label = ds[0]
    assert ids[0] == 1 and listops_value([LISTOPS_VOCAB[i] for i in ids[1:]]) == label
    batch = ds.get_batch([0, 1, 2])
    assert batch["input_ids"].shape == batch["attention_mask"].shape
    assert batch["attention_mask"].sum(1).tolist() == ds.lengths[:3].tolist()


def _flood(mask: np.ndarray, start: tuple[int, int]) -> np.ndarray:
    """The 8-connected component of ``mask`` holding ``start``."""
    seen = np.zeros_like(mask, dtype=bool)
    todo = deque([start])
    seen[start] = True
    h, w = mask.shape
    while todo:
        r, c = todo.popleft()
        for dr in (-1, 0, 1):
            for dc in (-1, 0, 1):
                rr, cc = r + dr, c + dc
                if 0 <= rr < h and 0 <= cc < w and mask[rr, cc] and not seen[rr, cc]:
                    seen[rr, cc] = True
                    todo.append((rr, cc))
    return seen


def test_pathfinder_labels_agree_with_a_flood_fill() -> None:
    rng = np.random.default_rng(5)
    for i in range(120):
        s = pathfinder_sample(rng, i % 2)
        solid = s.footprint > 0
        assert solid[s.image > 0].all()  # every lit pixel lies on a path or a dot
        for r, c in s.dots:
            assert (s.image[r - 1 : r + 2, c - 1 : c + 2] == 255).all()
        reached = _flood(solid, s.dots[0])
        assert bool(reached[s.dots[1]]) == bool(s.label), i
        # the component is one path's footprint: paths never touch each other
        assert len(np.unique(s.footprint[reached])) == 1


def test_pathfinder_is_balanced_and_seeded() -> None:
    images, labels = pathfinder_images(40, seed=2)
    assert images.shape == (40, 32, 32) and labels.sum() == 20
    again, _ = pathfinder_images(40, seed=2)
    assert np.array_equal(images, again)
    assert not np.array_equal(images, pathfinder_images(40, seed=3)[0])
    small = load_pathfinder("test", size=6, image_size=16)
    assert small.ids.shape == (6, 1 + 16 * 16) and small.class_counts() == [3, 3]


@pytest.mark.requires_data("kjv")
def test_bytetext_splits_are_balanced_and_disjoint() -> None:
    from tfam.data.sources.bytetext import BYTETEXT_SIZES, bytetext_passages, load_bytetext

    entry = get_dataset("lra-text")
    test = entry.load("test")
    assert len(test) == BYTETEXT_SIZES["test"] and test.ids.shape[1] == 1001
    assert len(set(test.class_counts())) == 1 and entry.info.num_labels == 6
    assert test.vocab_size == entry.info.vocab_size
    passages = bytetext_passages()
    assert {s: len(v) for s, v in passages.items()} == BYTETEXT_SIZES
    blocks = {s: {(k.split(":")[0], int(k.split(":")[1]) // 4000) for k, _, _ in v}
              for s, v in passages.items()}  # fmt: skip
    assert not blocks["train"] & blocks["test"] and not blocks["train"] & blocks["val"]
    assert load_bytetext("val").texts == load_bytetext("val").texts


def test_catalog_entries() -> None:
    for name, loader in (
        ("listops", lambda: load_listops("test", size=4, min_length=10, max_length=40)),
        ("pathfinder32", lambda: load_pathfinder("test", size=4)),
    ):
        entry = get_dataset(name)
        data = loader()
        assert entry.task == "sequence-classification"
        assert (entry.info.vocab_size, entry.info.num_labels) == (data.vocab_size, data.num_labels)
        assert entry.info.pad_token_id == data.pad_token_id == 0
        assert entry.recipe.model["max_positions"] >= 1000


@pytest.mark.slow
def test_catalog_entries_load_whole_splits() -> None:
    assert len(get_dataset("listops").load("test")) == 1000
    ds = get_dataset("pathfinder32").load("test")
    assert ds.ids.shape == (1000, 1025) and ds.class_counts() == [500, 500]
