"""Every registered task, and every task every family declares, under one contract: a task or
a family registered later is covered without writing a test.

For each task in ``TASKS``: it has a name (its key) and an objective, it is a :class:`Task`, it
is built for a tiny synthetic dataset of the kind it needs (or, given nothing, builds anyway or
says why not in one line), and its sums add up across micro-batches: the loss and the metric
sums of two half-batches add up to the whole batch's, in training and in evaluation, so
accumulation and DDP give the mean over the global batch.

For each family in ``MODEL_CLASSES`` and each task in its ``tasks``: a small model with the head
that computes that task trains one step through the task's API (``task_for``, ``collate``,
``augment``, ``count``, ``train_loss``): the loss is finite and a parameter changes.

The tiny datasets are keyed by task name; a task registered later that subclasses one of these
(a distillation task on images) uses its base's, found along its MRO.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import tfam
from tfam.models import MODEL_CLASSES, count_parameters, create_config, list_models
from tfam.training import TASKS, TrainConfig
from tfam.training.tasks import Task, split_batch, task_for

ITEMS = 6  # examples in a tiny dataset; even, so it halves


pytestmark = pytest.mark.usefixtures("one_thread")


class Tiny(torch.utils.data.Dataset):
    """A list of items with the attributes a task reads from a dataset (pad id, [MASK] id,
    vocabulary size)."""

    def __init__(self, items: list[Any], **attributes: Any) -> None:
        self.items = items
        for name, value in attributes.items():
            setattr(self, name, value)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Any:
        return self.items[i]


def _ids(g: torch.Generator, vocab: int, length: int) -> torch.Tensor:
    """Random ids in [3, vocab): never padding (0) nor the ids tfam reserves for bos/eos."""
    return torch.randint(3, vocab, (length,), generator=g)


# Rows of unequal lengths, so every batch holds padding: padding must add nothing to a sum.
LENGTHS = [5, 3, 6, 4, 2, 5]


def images(model: tfam.models.TfamModel, g: torch.Generator) -> Tiny:
    shape = model.example_inputs(1)[0].shape[1:]
    classes = model.config.num_classes
    return Tiny([(torch.randn(shape, generator=g), i % classes) for i in range(ITEMS)])


def labelled_rows(model: tfam.models.TfamModel, g: torch.Generator) -> Tiny:
    c = model.config
    rows = [(_ids(g, c.vocab_size, n), i % c.num_labels) for i, n in enumerate(LENGTHS)]
    return Tiny(rows, pad_token_id=c.pad_token_id)


def tagged_rows(model: tfam.models.TfamModel, g: torch.Generator) -> Tiny:
    c = model.config
    rows = [
        (_ids(g, c.vocab_size, n), torch.randint(0, c.num_labels, (n,), generator=g))
        for n in LENGTHS
    ]
    return Tiny(rows, pad_token_id=c.pad_token_id)


def text(model: tfam.models.TfamModel, g: torch.Generator) -> Tiny:
    c = model.config
    return Tiny([_ids(g, c.vocab_size, n) for n in LENGTHS], pad_token_id=0)


def masked_text(model: tfam.models.TfamModel, g: torch.Generator) -> Tiny:
    c = model.config
    # Long enough rows that each half-batch has masked tokens whatever the draw.
    rows = [_ids(g, c.vocab_size, n + 6) for n in LENGTHS]
    return Tiny(rows, pad_token_id=c.pad_token_id, mask_token_id=1, vocab_size=c.vocab_size)


def pairs(model: tfam.models.TfamModel, g: torch.Generator) -> Tiny:
    c = model.config
    rows = []
    for n in LENGTHS:
        target = [c.bos_token_id, *_ids(g, c.vocab_size, max(n - 1, 1)).tolist(), c.eos_token_id]
        rows.append((_ids(g, c.vocab_size, n), torch.tensor(target)))
    return Tiny(rows, pad_token_id=c.pad_token_id, eos_token_id=c.eos_token_id)


def frames(model: tfam.models.TfamModel, g: torch.Generator) -> Tiny:
    c = model.config
    rows = [
        (
            torch.randn(n + 4, c.n_mels, generator=g),
            torch.randint(0, c.num_labels, (n + 4,), generator=g),
        )
        for n in LENGTHS
    ]
    return Tiny(rows)


def utterances(model: tfam.models.TfamModel, g: torch.Generator) -> Tiny:
    c = model.config
    rows = [
        (torch.randn(n + 4, c.n_mels, generator=g), i % c.num_labels) for i, n in enumerate(LENGTHS)
    ]
    return Tiny(rows)


def transcripts(model: tfam.models.TfamModel, g: torch.Generator) -> Tiny:
    """Utterances of 4n + 8 frames, each with n symbols of 1..K-1 (0 is the CTC blank)."""
    c = model.config
    rows = [
        (
            torch.randn(4 * n + 8, c.n_mels, generator=g),
            torch.randint(1, c.num_labels, (n,), generator=g),
        )
        for n in LENGTHS
    ]
    return Tiny(rows, alphabet=[f"s{i}" for i in range(1, c.num_labels)], separator=" ")


def _graphs(model: tfam.models.TfamModel, g: torch.Generator) -> list[Any]:
    """Small random graphs (a ring of typed edges each) of unequal sizes: padding in every
    batch."""
    from tfam.data.graphs.graph import Graph

    c = model.config
    out = []
    for n in LENGTHS:
        ring = torch.arange(n)
        index = torch.stack([torch.cat([ring, (ring + 1) % n]), torch.cat([(ring + 1) % n, ring])])
        types = torch.randint(0, c.edge_types, (2 * n,), generator=g)
        out.append(Graph(torch.rand(n, c.in_features, generator=g), index, types))
    return out


def node_graphs(model: tfam.models.TfamModel, g: torch.Generator) -> Tiny:
    items = _graphs(model, g)
    for graph in items:  # about half the nodes labelled, the first always
        labels = torch.randint(0, model.config.num_labels, (graph.num_nodes,), generator=g)
        hidden = torch.rand(graph.num_nodes, generator=g) < 0.5
        hidden[0] = False
        graph.node_labels = labels.masked_fill(hidden, -100)
    return Tiny(items)


def labelled_graphs(model: tfam.models.TfamModel, g: torch.Generator) -> Tiny:
    items = _graphs(model, g)
    for i, graph in enumerate(items):
        graph.target = i % model.config.num_labels
    return Tiny(items)


def valued_graphs(model: tfam.models.TfamModel, g: torch.Generator) -> Tiny:
    items = _graphs(model, g)
    for graph in items:
        graph.target = float(torch.randn((), generator=g))
    return Tiny(items)


# The kind of dataset each task learns from (a task without an entry uses its base class's).
DATASETS: dict[str, Callable[[tfam.models.TfamModel, torch.Generator], Tiny]] = {
    "image-classification": images,
    "sequence-classification": labelled_rows,
    "token-classification": tagged_rows,
    "causal-lm": text,
    "masked-lm": masked_text,
    "seq2seq": pairs,
    "frame-classification": frames,
    "utterance-classification": utterances,
    "ctc": transcripts,
    "node-classification": node_graphs,
    "graph-classification": labelled_graphs,
    "graph-regression": valued_graphs,
}


def dataset_maker(task: str) -> Callable[[tfam.models.TfamModel, torch.Generator], Tiny]:
    for cls in TASKS[task].__mro__:
        name = getattr(cls, "__dict__", {}).get("name")
        if name in DATASETS:
            return DATASETS[name]
    pytest.fail(f"task {task!r}: no tiny dataset of its kind in DATASETS, nor for a base class")


def families_for(task: str) -> list[str]:
    return sorted(f for f, cls in MODEL_CLASSES.items() if task in cls.tasks)


def small_model(family: str, task: str) -> tfam.models.TfamModel:
    """The family's smallest preset, shrunk (as the preset contract does), with the head that
    computes ``task`` and a small vocabulary where it has one."""
    cls = MODEL_CLASSES[family]
    name = min(
        (n for n in list_models() if create_config(n).family == family), key=count_parameters
    )
    config = create_config(name)
    overrides: dict[str, Any] = cls.small_overrides(config)
    heads = [head for head, t in cls.head_tasks.items() if t == task]
    if heads:
        overrides["head"] = heads[0]
    if hasattr(config, "vocab_size"):
        overrides["vocab_size"] = min(config.vocab_size, 64)
    torch.manual_seed(0)
    model = tfam.create_model(name, **overrides)
    assert cls.head_task(model.config) in ("", task), (family, task, model.config)
    return model


def task_options(name: str, model: tfam.models.TfamModel) -> dict[str, Any]:
    """What ``task_for`` needs besides the dataset: a teacher for a task that declares
    ``needs_teacher`` (the student's architecture, initialised from another seed)."""
    if not TASKS[name].needs_teacher:
        return {}
    values = {k: v for k, v in model.config.to_dict().items() if k != "family"}
    torch.manual_seed(1)
    return {"teacher": tfam.create_model(model.config.family, **values).eval()}


def prepared(task: Task, batch: dict, generator: torch.Generator, dataset: Any) -> dict:
    """The batch as a training step sees it (augment adds what a task draws, MLM's masks)."""
    return task.augment(batch, None, generator, dataset)


FAMILY_TASKS = [(f, t) for f, cls in sorted(MODEL_CLASSES.items()) for t in cls.tasks]


def test_every_family_declares_a_registered_task() -> None:
    assert {f for f, _ in FAMILY_TASKS} == set(MODEL_CLASSES)
    for family, task in FAMILY_TASKS:
        assert task in TASKS, f"family {family!r} declares task {task!r}, which is not registered"


@pytest.mark.parametrize("family,task_name", FAMILY_TASKS)
def test_family_trains_one_step_on_each_task_it_declares(family: str, task_name: str) -> None:
    model = small_model(family, task_name).train()
    g = torch.Generator().manual_seed(0)
    dataset = dataset_maker(task_name)(model, g)
    task = task_for(task_name, dataset, **task_options(task_name, model))
    batch = prepared(task, task.collate([dataset[i] for i in range(len(dataset))]), g, dataset)
    before = {k: p.detach().clone() for k, p in model.named_parameters()}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss, sums = task.train_loss(model, batch, TrainConfig())
    assert loss.ndim == 0 and torch.isfinite(loss), (family, task_name, loss)
    assert all(torch.isfinite(v).all() for v in sums.values()), sums
    (loss / task.count(batch)).backward()
    optimizer.step()
    changed = [k for k, p in model.named_parameters() if not torch.equal(p, before[k])]
    assert changed, f"{family}/{task_name}: one step changed no parameter"
    metrics = task.reduce({k: float(v) for k, v in sums.items()})
    assert set(task.metrics) <= set(metrics), (task.metrics, metrics)


TASK_NAMES = sorted(TASKS)


@pytest.mark.parametrize("name", TASK_NAMES)
def test_task_declares_itself(name: str) -> None:
    cls = TASKS[name]
    assert cls.name == name
    # Its objective's short name for `tfam train --task` ("" stands for the name).
    objective = cls.objective or cls.name
    assert isinstance(objective, str) and objective and objective.split() == [objective], name
    assert cls.primary_metric in cls.metrics, (cls.primary_metric, cls.metrics)
    assert isinstance(cls.higher_is_better, bool) and cls.unit
    # Given no dataset it builds, or says why not in one line naming the task.
    try:
        built = task_for(name)
    except ValueError as err:
        assert "\n" not in str(err) and name in str(err), str(err)
    else:
        assert isinstance(built, Task)


@pytest.mark.parametrize("name", TASK_NAMES)
def test_sums_add_up_across_micro_batches(name: str) -> None:
    """Two half-batches' loss and metric sums equal the whole batch's, and their counts too
    (in eval mode: dropout off, so the same rows give the same numbers)."""
    families = families_for(name)
    if not families:
        pytest.skip(f"no registered family declares task {name!r}")
    model = small_model(families[0], name).eval()
    g = torch.Generator().manual_seed(0)
    dataset = dataset_maker(name)(model, g)
    task = task_for(name, dataset, **task_options(name, model))
    assert isinstance(task, Task) and task.name == name
    batch = prepared(task, task.collate([dataset[i] for i in range(len(dataset))]), g, dataset)
    halves = split_batch(batch, 2)
    assert len(halves) == 2
    config = TrainConfig()
    with torch.no_grad():
        count = task.count(batch)
        assert count > 0
        torch.testing.assert_close(sum(task.count(h) for h in halves), count)
        loss, sums = task.train_loss(model, batch, config)
        parts = [task.train_loss(model, h, config) for h in halves]
        torch.testing.assert_close(sum(p[0] for p in parts), loss, rtol=1e-5, atol=1e-5)
        for key, value in sums.items():
            total = sum(p[1][key] for p in parts)
            torch.testing.assert_close(total, value, rtol=1e-5, atol=1e-5, msg=f"train {key}")
        evaluated = task.eval_sums(model, batch)
        halves_evaluated = [task.eval_sums(model, h) for h in halves]
        for key, value in evaluated.items():
            total = sum(e[key] for e in halves_evaluated)
            torch.testing.assert_close(total, value, rtol=1e-5, atol=1e-5, msg=f"eval {key}")
    metrics = task.reduce({k: float(v) for k, v in evaluated.items()})
    assert set(task.metrics) <= set(metrics)
    assert all(isinstance(metrics[m], float) for m in task.metrics)
