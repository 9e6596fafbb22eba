"""`tfam train --data D --task T`: --data names what to learn from, --task the objective where
the data allows several (the catalog entry's ``tasks``, its default first); an invalid pair is
one line listing the valid tasks; today's `--task sentiment` (a data set name) is --data."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import pytest

from tfam.data import get_dataset, register_dataset, registry, task_facts
from tfam.models import MODEL_CLASSES
from tfam.training import TASKS, ImageClassification

TINY = ["--set", "dim=16", "--set", "depth=1", "--set", "heads=2", "--set", "ffn_dim=32"]
TINY += ["--batch-size", "32", "--max-steps", "1", "--threads", "1", "--quiet"]


def test_every_entry_lists_its_default_task_first() -> None:
    entry = get_dataset("digits")
    assert entry.tasks == ("image-classification",)
    assert get_dataset("sentiment").tasks[0] == get_dataset("sentiment").task
    # The facts of the default task are the data's.
    assert task_facts(get_dataset("sentiment"))["head"] == "sequence"
    assert task_facts(get_dataset("pos"), "masked-lm")["head"] == "mlm"
    # The labelled sentences can pre-train BERT (`--data sentiment --task mlm`).
    assert get_dataset("sentiment").tasks == ("sequence-classification", "masked-lm")
    assert task_facts(get_dataset("sentiment"), "masked-lm")["head"] == "mlm"


def test_an_invalid_pair_is_one_line_naming_the_valid_tasks(cli, one_line, tmp_path) -> None:
    code, _, err = cli(["train", "vit", "--data", "digits", "--task", "mlm", "--out", tmp_path])
    assert code == 2
    assert "--task 'mlm' is invalid for --data digits: expected one of classify" in one_line(err)
    code, _, err = cli(["train", "bert", "--task", "sentiment", "--data", "sentiment"])
    assert code == 2 and "expected one of classify" in one_line(err)


def test_an_objective_needs_data(cli, one_line, tmp_path) -> None:
    code, _, err = cli(["train", "gpt", "--task", "clm", "--out", tmp_path])
    assert code == 2 and "--task 'clm' needs --data: the data set to learn from" in one_line(err)
    code, _, err = cli(["train", "vit", "--out", tmp_path])
    assert code == 2 and "--data is required" in one_line(err)


def test_the_default_objective_by_name_is_the_plain_run(cli, tmp_path) -> None:
    out = tmp_path / "run"
    argv = ["train", "vit", "--data", "digits", "--task", "classify", "--out", out, *TINY]
    code, _, err = cli(argv)
    assert code == 0, err
    args = json.loads((out / "train_args.json").read_text())
    assert "task" not in args  # the data's default: train_args.json as before


@pytest.fixture
def two_tasks(monkeypatch) -> Iterator[str]:
    """digits under another name, allowing a second objective registered by this test."""

    class Shy(ImageClassification):
        """Image classification under another name (the loss is the same)."""

        name = "shy-classification"
        objective = "shy"

    monkeypatch.setattr(MODEL_CLASSES["vit"], "tasks", ("image-classification", Shy.name))
    entry = dataclasses.replace(
        get_dataset("digits"), name="digits-two", aliases=(), tasks=(Shy.name,)
    )
    register_dataset(entry)
    yield entry.name
    del registry._CATALOG["digits-two"], registry._ALIASES["digits-two"]
    del TASKS[Shy.name]


def test_a_second_objective_is_chosen_with_task(cli, one_line, two_tasks, tmp_path) -> None:
    entry = get_dataset(two_tasks)
    assert entry.tasks == ("image-classification", "shy-classification")
    code, _, err = cli(["train", "vit", "--data", two_tasks, "--task", "mlm", "--out", tmp_path])
    assert code == 2 and "expected one of classify, shy" in one_line(err)

    out = tmp_path / "shy"
    code, _, err = cli(["train", "vit", "--data", two_tasks, "--task", "shy", "--out", out, *TINY])
    assert code == 0, err
    assert json.loads((out / "train_args.json").read_text())["task"] == "shy-classification"
    # A resume keeps the run's task, and refuses another.
    again = ["--resume", "--max-steps", "2", "--quiet"]
    code, _, err = cli(["train", "vit", "--data", two_tasks, "--out", out, *again])
    assert code == 0, err
    argv = ["train", "vit", "--data", two_tasks, "--task", "classify", "--out", out, "--resume"]
    code, _, err = cli(argv)
    assert code == 2
    assert "holds a --task shy run, this command asks for --task classify" in one_line(err)
