"""No silent failure (issue 21, point 6): the shared detection of degenerate outputs and of a
classifier at chance, and the notes the commands print from it."""

from __future__ import annotations

import math

import pytest
import torch

from tfam.training.sanity import (
    chance_problem,
    classifier_problem,
    label_counts,
    output_note,
    output_problem,
)


def test_empty_output_is_a_problem() -> None:
    assert output_problem([], what="the translation") == "the translation is empty"
    assert output_problem(text="  \n") == "output is empty"
    # Ids that decode to nothing are empty too.
    assert output_problem([5, 6], text=" ") == "output is empty"


def test_one_token_repeated_for_more_than_half() -> None:
    problem = output_problem([7, 7, 7, 3, 7], label=lambda i: f"<{i}>")
    assert problem == "output repeats one token ('<7>') for 4 of its 5 tokens"
    assert "id 7" in output_problem([7, 7, 7, 3])
    # Exactly half is not more than half; a short answer with one token twice is ordinary.
    assert output_problem([7, 7, 7, 1, 2, 3]) is None
    assert output_problem([4, 4, 5]) is None
    assert output_problem([1, 2, 3, 4]) is None
    # From text alone, words count.
    assert "'la'" in output_problem(text="la la la casa")
    assert output_problem(text="y dijo Dios") is None


def test_output_note_says_what_to_try() -> None:
    one = output_note("the translation is empty")
    assert one.startswith("the translation is empty; ") and "--max-minutes" in one
    many = output_note("the translation is empty", 3, 10)
    assert many.startswith("3 of 10 outputs are empty or one token repeated (first: the transl")


def test_chance_by_majority_class_and_uniform_guess() -> None:
    # 52% majority over 2 classes: 51.6% is chance, 80% is not.
    problem = chance_problem(0.516, counts=[520, 480], split="validation")
    assert problem is not None and "52.00%" in problem and "51.60%" in problem
    assert "most frequent class" in problem and "--max-minutes" in problem
    assert chance_problem(0.80, counts=[520, 480]) is None
    # Without counts: 1 / num_classes, with a margin of two standard errors.
    assert chance_problem(0.11, num_classes=10, examples=1000) is not None
    assert chance_problem(0.13, num_classes=10, examples=1000) is None
    assert chance_problem(0.12, num_classes=10, examples=100) is not None  # 2 s.e. = 6%
    assert chance_problem(math.nan, num_classes=10) is None
    assert chance_problem(0.5) is None  # nothing to compare with


def test_label_counts_of_datasets() -> None:
    class Images:
        def class_counts(self) -> torch.Tensor:
            return torch.tensor([3, 1])

    class Sentences:
        labels = [1, 0, 1, 1]
        classes = ["neg", "pos", "neutral"]

    class Tags:
        labels = [torch.tensor([-100, 0, 2]), torch.tensor([2, -100])]

    assert label_counts(Images()) == [3, 1]
    assert label_counts(Sentences()) == [1, 3, 0]
    assert label_counts(Tags()) == [1, 0, 2]
    assert label_counts(object()) is None


@pytest.mark.parametrize(
    ("task_metric", "acc", "noted"),
    [("acc", 0.5, True), ("acc", 0.99, False), ("loss", 0.5, False)],
)
def test_classifier_problem(task_metric: str, acc: float, noted: bool) -> None:
    class Task:
        primary_metric = task_metric

    class Data:
        labels = [0, 1] * 50
        num_labels = 2

    problem = classifier_problem(Task(), Data(), {"acc": acc})
    assert (problem is not None) == noted
