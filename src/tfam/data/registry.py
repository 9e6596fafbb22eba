"""The catalog's entries and the registry that holds them.

A :class:`DatasetEntry` says what a dataset is and how tfam trains on it (task, facts, loader,
splits, :class:`Recipe`, augmentation); :func:`register_dataset` adds one by name and
:func:`get_dataset` finds it. ``TASK_FACTS`` names, per task, the attributes of a dataset
that are also model config fields. The registered datasets themselves are in
:mod:`tfam.data.catalog`; the user's own data becomes entries in :mod:`tfam.data.user_data`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tfam.data.sources.images import (
    SPLITS,
    DatasetInfo,
    check_split,
)
from tfam.data.text.dataset import TextDatasetInfo

# Per task: dataset attributes that a model's config must equal (same names as config fields).
# A classifier's "head" is BERT's head for the task ("sequence", "token", "mlm").
TASK_FACTS: dict[str, tuple[str, ...]] = {
    "image-classification": ("image_size", "in_channels", "num_classes"),
    "seq2seq": ("vocab_size", "pad_token_id", "bos_token_id", "eos_token_id"),
    "sequence-classification": ("vocab_size", "pad_token_id", "num_labels", "head"),
    "token-classification": ("vocab_size", "pad_token_id", "num_labels", "head"),
    "causal-lm": ("vocab_size",),
    "masked-lm": ("vocab_size", "pad_token_id", "head"),
    # Speech (frames of n_mels log-mel values): the head and its labels follow from the task.
    "frame-classification": ("n_mels", "num_labels", "head"),
    "utterance-classification": ("n_mels", "num_labels", "head"),
    "ctc": ("n_mels", "num_labels", "head"),
    # Graphs (the graph family): the node features' width, the edge types, the head's outputs.
    "node-classification": ("in_features", "edge_types", "num_labels", "head"),
    "graph-classification": ("in_features", "edge_types", "num_labels", "head"),
    "graph-regression": (
        "in_features",
        "edge_types",
        "num_labels",
        "head",
        "target_shift",
        "target_scale",
    ),  # fmt: skip
}


# BERT's head for a task, where the task decides it (a data set's ``head`` fact is its default
# task's).
TASK_HEADS: dict[str, str] = {
    "sequence-classification": "sequence",
    "token-classification": "token",
    "masked-lm": "mlm",
    "node-classification": "node",
    "graph-classification": "graph",
    "graph-regression": "value",
}


def task_facts(entry: DatasetEntry, task: str | None = None) -> dict[str, Any]:
    """The model config fields that training ``entry`` for ``task`` (default: its default
    task) fixes: :data:`TASK_FACTS` of the task (of the default task for a task the table does
    not know), read from ``entry.info``, with the task's BERT head (:data:`TASK_HEADS`)."""
    task = task or entry.task
    names = TASK_FACTS.get(task, TASK_FACTS[entry.task])
    facts = {k: getattr(entry.info, k) for k in names}
    if "head" in facts and task in TASK_HEADS:
        facts["head"] = TASK_HEADS[task]
    return facts


@dataclass(frozen=True)
class Recipe:
    """How tfam trains a dataset by default: a model preset (None: the family's own defaults),
    extra model config fields, :class:`tfam.training.TrainConfig` values, and the CPU thread
    count (None: torch's choice). Anything given on the command line wins."""

    preset: str | None = None
    model: Mapping[str, Any] = field(default_factory=dict)
    train: Mapping[str, Any] = field(default_factory=dict)
    threads: int | None = None
    note: str = ""


Loader = Callable[..., Any]  # loader(split, *, root=None, seed=0) -> dataset


@dataclass(frozen=True)
class DatasetEntry:
    """A dataset: its name, task, facts, loader, splits, training recipe and augmentation.

    ``splits``: every split ``load`` accepts; ``train_split`` is what a model is fitted on,
    ``val_split`` chooses the best epoch, ``test_split`` (None: none) is reported at the end.
    ``augment``: (padding, flip) of the default :class:`BatchAugment`.
    ``task``: the default task (a ``tfam.training.TASKS`` name); ``tasks``: every task the
    data allows, the default first (``tfam train --task`` chooses among them).
    ``recipe``: how the data's first family trains (the family of ``recipe.preset``);
    ``family_recipes``: other families' recipes by family name (``tfam train cnn --data
    fashion-mnist`` takes ``family_recipes["cnn"]``); :meth:`for_family` picks one.
    """

    name: str
    task: str
    info: DatasetInfo | TextDatasetInfo
    loader: Loader
    recipe: Recipe = field(default_factory=Recipe)
    augment: tuple[int, bool] = (0, False)
    splits: tuple[str, ...] = SPLITS
    train_split: str = "fit"
    val_split: str | None = "val"
    test_split: str | None = "test"
    aliases: tuple[str, ...] = ()
    is_folder: bool = False
    tasks: tuple[str, ...] = ()
    family_recipes: Mapping[str, Recipe] = field(default_factory=dict)
    # (entry, task, **options) -> the entry for that task, where the facts, splits and recipe
    # differ by task (spoken-digits: tag by voice, speaker by utterance); None: the same entry.
    specialize: Callable[..., DatasetEntry] | None = None
    # Whether the run's --seed chooses the split (karate: which members are labelled); a run
    # keeps that seed with its data (graph.json) and loads its splits with it. False: splits
    # are fixed (the loader's seed stays 0), so runs with other seeds compare on the same data.
    seeded: bool = False

    def for_task(self, task: str, *, root: Any = None, **options: Any) -> DatasetEntry:
        """This entry for ``task`` (one of ``tasks``) with the data's ``options`` (the spoken
        digits' ``labels``): ``specialize``'s entry, else this one. ``root`` (where the data's
        files are, --data-root) goes to ``specialize``, whose facts may come from the files (the
        spoken digits' voices and phonemes). An option given to data that takes none is one
        line."""
        given = {k: v for k, v in options.items() if v is not None}
        if self.specialize is not None and root is not None:
            given["root"] = root
        if self.specialize is None:
            if given:
                name = next(iter(given))
                raise ValueError(
                    f"--{name.replace('_', '-')} is invalid for --data {self.info.name}: it "
                    "chooses the frame labels of spoken-digits (word, phoneme)"
                )
            return self
        return self.specialize(self, task, **given)

    def for_family(self, family: str) -> DatasetEntry:
        """This entry with ``recipe`` the one ``family`` trains with: its own in
        ``family_recipes``, else the entry's ``recipe`` (whose preset a family uses only when
        the preset is of that family)."""
        recipe = self.family_recipes.get(family)
        return self if recipe is None else dataclasses.replace(self, recipe=recipe)

    def __post_init__(self) -> None:
        # Every task the data allows, the default (``task``) first; () = just the default.
        others = tuple(t for t in self.tasks if t != self.task)
        object.__setattr__(self, "tasks", (self.task, *others))

    def load(self, split: str = "train", *, root: str | os.PathLike | None = None, seed: int = 0):  # noqa: ANN201
        """The dataset object of ``split`` (an ImageDataset, an ImageFolder, ...)."""
        check_split(split, self.splits)
        return self.loader(split, root=root, seed=seed)

    @property
    def classes(self) -> tuple[str, ...]:
        return self.info.classes


_CATALOG: dict[str, DatasetEntry] = {}
_ALIASES: dict[str, str] = {}
CATALOG: Mapping[str, DatasetEntry] = MappingProxyType(_CATALOG)


def _key(name: str) -> str:
    return str(name).strip().lower().replace("_", "-")


def register_dataset(entry: DatasetEntry) -> DatasetEntry:
    """Add a dataset to the catalog (its name and aliases must be new)."""
    if entry.task not in TASK_FACTS:
        raise ValueError(
            f"task={entry.task!r} is invalid: expected one of {', '.join(sorted(TASK_FACTS))}"
        )
    for key in (entry.name, *entry.aliases):
        if _key(key) in _ALIASES:
            raise ValueError(f"dataset {key!r} is registered twice")
    _CATALOG[entry.name] = entry
    for key in (entry.name, *entry.aliases):
        _ALIASES[_key(key)] = entry.name
    return entry


def list_datasets() -> list[str]:
    """The registered dataset names, in registration order."""
    return list(_CATALOG)


def is_registered(name: str) -> bool:
    """Whether ``name`` is a registered dataset's name or alias (case, ``_`` and ``-`` do not
    matter)."""
    return _key(name) in _ALIASES


def get_dataset(name: str) -> DatasetEntry:
    """The entry of a registered dataset (case, ``_`` and ``-`` do not matter)."""
    key = _ALIASES.get(_key(name))
    if key is None:
        raise ValueError(f"unknown dataset {name!r}; valid names: {', '.join(_CATALOG)}")
    return _CATALOG[key]


def add_family_recipe(name: str, family: str, preset: str) -> None:
    """Give the registered dataset ``name`` a recipe for ``family``: its own recipe's training
    values and threads with ``preset``."""
    entry = _CATALOG[name]
    recipe = dataclasses.replace(entry.recipe, preset=preset, model={})
    recipes = {**entry.family_recipes, family: recipe}
    _CATALOG[name] = dataclasses.replace(entry, family_recipes=recipes)
