"""No silent failure: recognise outputs and scores that say a model has not learned.

An undertrained model does not fail, it answers nonsense: a translation or a generated text
that is empty, or one token over and over, or a classifier no better than always answering its
most frequent class. The commands (``tfam translate``, ``generate``, ``eval`` and the trainer's
summary) ask these functions and print what they return as one ``tfam: note:`` line on stderr,
so the result on stdout stays as it was.

- :func:`output_problem` (ids or text of one output) -> what is wrong with it, or None;
- :func:`chance_problem` (an accuracy, the class counts or number of classes, the examples) ->
  why it is at chance, or None; :func:`classifier_problem` asks it for a task (one whose
  primary metric is ``acc``) and a dataset (:func:`label_counts`);
- :data:`UNTRAINED_ADVICE` / :data:`CHANCE_ADVICE`: what to try, appended to the notes.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = [
    "CHANCE_ADVICE",
    "UNTRAINED_ADVICE",
    "chance_problem",
    "classifier_problem",
    "label_counts",
    "output_note",
    "output_problem",
]

UNTRAINED_ADVICE = (
    "the model has probably not learned enough yet: train longer (more --epochs or a larger "
    "--max-minutes), check the training data, or lower --lr if the training loss did not fall"
)
CHANCE_ADVICE = (
    "train longer (more --epochs or a larger --max-minutes), check the data and its labels, or "
    "lower --lr (a too high rate can stall at the majority class)"
)

# A token counts as "repeated" from this many occurrences on: a 2- or 3-token answer with one
# token twice ("a a b") is ordinary in short outputs (the reverse task's symbols, say).
MIN_REPEATS = 3


def output_problem(
    ids: Sequence[int] | None = None,
    text: str | None = None,
    what: str = "output",
    label: Callable[[int], str] | None = None,
) -> str | None:
    """What is wrong with one generated output, or None when nothing is.

    ``ids``: the generated token ids (without the prompt, <bos> and <eos>); ``text``: the
    decoded text. Empty: no ids, or a text of only whitespace. Repeated: one id is more than
    half of the ids (at least :data:`MIN_REPEATS` times); with only ``text``, one
    whitespace-separated word is. ``what`` names the output in the message ("the translation");
    ``label(id)`` shows the repeated id as text (a tokenizer's decode of one id)."""
    if (ids is not None and len(ids) == 0) or (text is not None and not text.strip()):
        return f"{what} is empty"
    units: Sequence[Any] = list(ids) if ids is not None else (text or "").split()
    if not units:
        return None
    unit, count = Counter(units).most_common(1)[0]
    if count >= MIN_REPEATS and 2 * count > len(units):
        name = "token" if ids is not None else "word"
        shown = repr(unit) if ids is None else repr(label(unit)) if label else f"id {unit}"
        return f"{what} repeats one {name} ({shown}) for {count} of its {len(units)} {name}s"
    return None


def output_note(problem: str, count: int = 1, total: int = 1) -> str:
    """The note for ``problem`` (from :func:`output_problem`), of ``count`` of ``total``
    outputs when there are several."""
    head = (
        problem
        if total == 1
        else f"{count} of {total} outputs are empty or one token repeated (first: {problem})"
    )
    return f"{head}; {UNTRAINED_ADVICE}"


def chance_problem(
    accuracy: float,
    *,
    counts: Sequence[int] | None = None,
    num_classes: int | None = None,
    examples: int | None = None,
    split: str = "validation",
) -> str | None:
    """Why ``accuracy`` is at chance, or None when it is clearly better.

    Chance is the better of always answering the most frequent class (``counts``: examples
    per class of the split) and guessing uniformly (``1 / num_classes``). The accuracy must
    beat it by a margin: two standard errors of an accuracy at chance over ``examples`` (the
    counted examples, ``sum(counts)`` by default), and at least one percentage point."""
    if accuracy is None or math.isnan(accuracy):
        return None
    baselines: list[tuple[float, str]] = []
    if counts:
        total = sum(int(c) for c in counts)
        if total > 0:
            baselines.append((max(counts) / total, "always answering its most frequent class"))
            examples = examples if examples is not None else total
        if num_classes is None:
            num_classes = len(counts)
    if num_classes is not None and num_classes >= 2:
        baselines.append((1.0 / num_classes, f"guessing among {num_classes} classes"))
    if not baselines:
        return None
    chance, how = max(baselines, key=lambda b: b[0])
    margin = 0.01
    if examples:
        margin = max(margin, 2 * math.sqrt(chance * (1 - chance) / examples))
    if accuracy > chance + margin:
        return None
    return (
        f"{split} accuracy {100 * accuracy:.2f}% is at chance ({how} scores "
        f"{100 * chance:.2f}%): the classifier has not learned; {CHANCE_ADVICE}"
    )


def label_counts(dataset: Any) -> list[int] | None:
    """Examples per class of a labelled dataset: its ``class_counts()`` (image datasets), else
    a count of its ``labels`` (ints, or one tensor of labels per example for taggers; -100 and
    other negative labels are not counted); None for a dataset without labels."""
    counts = getattr(dataset, "class_counts", None)
    if callable(counts):
        return [int(c) for c in torch.as_tensor(counts()).tolist()]
    labels = getattr(dataset, "labels", None)
    if labels is None:
        return None
    if isinstance(labels, torch.Tensor):
        flat = labels.reshape(-1)
    elif len(labels) and isinstance(labels[0], torch.Tensor):
        flat = torch.cat([t.reshape(-1) for t in labels])
    else:
        try:
            flat = torch.as_tensor(list(labels), dtype=torch.int64).reshape(-1)
        except (TypeError, ValueError):
            return None
    flat = flat[flat >= 0].to(torch.int64)
    classes = getattr(dataset, "classes", None)
    minlength = len(classes) if classes else 0
    return (
        [int(c) for c in torch.bincount(flat, minlength=minlength).tolist()]
        if flat.numel()
        else None
    )


def classifier_problem(
    task: Any, dataset: Any, metrics: dict[str, float], split: str = "validation"
) -> str | None:
    """:func:`chance_problem` of a classification task's accuracy (``metrics["acc"]``) on
    ``dataset``; None for a task whose primary metric is not accuracy, or without a score."""
    if getattr(task, "primary_metric", None) != "acc" or dataset is None:
        return None
    accuracy = metrics.get("acc")
    if accuracy is None:
        return None
    counts = label_counts(dataset)
    num_classes = getattr(dataset, "num_classes", None) or getattr(dataset, "num_labels", None)
    if counts is None and num_classes is None:
        return None
    return chance_problem(
        float(accuracy),
        counts=counts,
        num_classes=int(num_classes) if num_classes is not None else None,
        split=split,
    )
