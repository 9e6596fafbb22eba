"""The dataset catalog: every dataset tfam knows by name, and image folders by path.

An entry says what a dataset is and how tfam trains on it — the one place for that knowledge:

    entry = get_dataset("digits")
    entry.task                 # "image-classification"
    entry.info                 # DatasetInfo: image_size, in_channels, classes, ... (loads nothing)
    entry.load("fit")          # the dataset object of a split (train, fit, val, test)
    entry.recipe               # Recipe: model preset, TrainConfig values, threads
    default_augment("digits")  # BatchAugment with the entry's padding and flip

    entry = resolve_data("photos/")   # a directory: an image folder (tfam.data.sources.folder)
    entry = pixel_folder_entry("photos/", (16, 16), GreyPalette(16))  # the same as pixels (iGPT)
    entry = resolve_data("reviews.csv", family="bert")   # the user's text (sources/files.py)
    entry = from_files("story.txt", family="gpt")        # the same, the Python spelling

A new dataset is one :func:`register_dataset` call; the command line lists, loads and trains
it with no other change. ``TASK_FACTS`` names, per task, the attributes of a dataset that are
also model config fields (a ViT trained on digits needs ``image_size=8``, ``in_channels=1``,
``num_classes=10``).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from tfam.data.sources.bytetext import BYTETEXT_INFO, load_bytetext
from tfam.data.sources.charlm import KJV_CHARS_INFO, load_kjv_chars
from tfam.data.sources.files import load_user_text
from tfam.data.sources.folder import FOLDER_VAL_FRACTION, ImageFolder, scan_folder
from tfam.data.sources.graphfiles import is_graph_data, load_graph_files
from tfam.data.sources.images import (
    DIGITS,
    FASHION_MNIST,
    SPLITS,
    DatasetInfo,
    check_split,
    load_digits,
    load_fashion_mnist,
)
from tfam.data.sources.karate import KARATE_INFO, load_karate
from tfam.data.sources.listops import LISTOPS_INFO, load_listops
from tfam.data.sources.nci import NCI_SPLITS, load_nci_tpsa, nci_tpsa_info
from tfam.data.sources.pathfinder import PATHFINDER_INFO, load_pathfinder
from tfam.data.sources.pixels import PixelInfo, load_folder_pixels, load_pixels, pixels_info
from tfam.data.sources.sentiment import SENTIMENT_INFO, load_sentiment
from tfam.data.sources.seq2seq import (
    KJV_RV_VOCAB,
    SYMBOL_SIZES,
    SYMBOLS,
    load_kjv_rv,
    load_symbol_task,
)
from tfam.data.sources.speech import (
    LABEL_KINDS,
    audio_csv,
    audio_folder,
    is_audio_csv,
    is_audio_folder,
    spoken_digits,
    spoken_digits_info,
)
from tfam.data.sources.textfiles import is_text_folder
from tfam.data.sources.treebank import TURKISH_POS_INFO, load_turkish_pos
from tfam.data.text.dataset import TEXT_SPLITS, TextDatasetInfo
from tfam.data.vision.augment import BatchAugment
from tfam.data.vision.palette import PALETTE_FILE, Palette, load_palette

__all__ = [
    "CATALOG",
    "TASK_FACTS",
    "TASK_HEADS",
    "DatasetEntry",
    "Recipe",
    "dataset_info",
    "default_augment",
    "FILE_OPTIONS",
    "folder_entry",
    "from_files",
    "graph_files_entry",
    "pixel_folder_entry",
    "audio_entry",
    "run_pixels",
    "get_dataset",
    "list_datasets",
    "load_dataset",
    "register_dataset",
    "resolve_data",
    "set_family_tasks",
    "task_facts",
]

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


def get_dataset(name: str) -> DatasetEntry:
    """The entry of a registered dataset (case, ``_`` and ``-`` do not matter)."""
    key = _ALIASES.get(_key(name))
    if key is None:
        raise ValueError(f"unknown dataset {name!r}; valid names: {', '.join(_CATALOG)}")
    return _CATALOG[key]


def folder_entry(
    path: str | os.PathLike,
    image_size: int | tuple[int, int] | None = None,
    in_channels: int | None = None,
) -> DatasetEntry:
    """An image folder (one sub-folder per class, or timm's train/ val/ test/ layout) as a
    catalog entry; scans it (see :mod:`tfam.data.sources.folder`), so unreadable files are
    named here. ``image_size``: bring every image to this size (default: the first image's);
    ``in_channels``: to 1 or 3 channels (default: 1 when every image is grey)."""
    index = scan_folder(path, image_size, in_channels)
    h, w = index.image_size
    folder = index.root
    size = index.image_size if image_size is not None else None

    def loader(split: str, *, root: Any = None, seed: int = 0) -> ImageFolder:
        return ImageFolder(folder, split, seed=seed, image_size=size, in_channels=in_channels)

    root = folder
    train = len(ImageFolder(root, "train", image_size=size, in_channels=in_channels))
    fit_size = len(ImageFolder(root, "fit", image_size=size, in_channels=in_channels))
    val_size = len(ImageFolder(root, "val", image_size=size, in_channels=in_channels))
    has_test = "test" in index.splits
    test_size = (
        len(ImageFolder(root, "test", image_size=size, in_channels=in_channels)) if has_test else 0
    )
    if index.split_ranges:
        splits_text = f"splits as given (timm layout): {train} train/ / {val_size} val/" + (
            f" / {test_size} test/" if has_test else ""
        )
    else:
        splits_text = (
            f"{fit_size} fit / {val_size} val ({FOLDER_VAL_FRACTION:.0%} stratified holdout, "
            "seeded)"
        )
    info = DatasetInfo(
        name=str(root),
        image_size=h if h == w else (h, w),
        in_channels=index.in_channels,
        classes=index.classes,
        pixel_scale=255,
        train_size=train,
        test_size=test_size,
        description=(
            f"image folder {root}: {len(index.files)} images in {len(index.classes)} classes, "
            + splits_text
        ),
    )
    return DatasetEntry(
        name=str(root),
        task="image-classification",
        info=info,
        loader=loader,
        # Your photos: random crops of 1/16 of the side, flips (most photos are mirror-safe).
        augment=(max(h, w) // 16, True),
        splits=index.splits,
        test_split="test" if has_test else None,
        is_folder=True,
    )


# The objectives of images read as pixel sequences (iGPT): next-pixel prediction, then a
# classifier fine-tuned from it.
_PIXEL_TASKS = ("causal-lm", "sequence-classification")


def pixel_folder_entry(
    path: str | os.PathLike,
    image_size: tuple[int, int],
    palette: Palette,
    in_channels: int | None = None,
) -> DatasetEntry:
    """An image folder read as palette-id sequences for a GPT over pixels (iGPT): its splits
    (:func:`folder_entry`), each image brought to ``image_size`` (H, W) and ``in_channels``
    (None: the folder's) and encoded by ``palette``
    (:func:`tfam.data.sources.pixels.load_folder_pixels`). Its task is next-pixel prediction
    (causal-lm), or classification (``--task classify``); the facts are a :class:`PixelInfo`.
    A palette for another number of channels than the images have is one line."""
    h, w = (int(v) for v in image_size)
    own = scan_folder(path)  # the images as they are (size, channels), for the description
    channels = int(in_channels or own.in_channels)
    if palette.channels != channels:
        raise ValueError(
            f"palette={palette.describe()!r} is invalid for the image folder {own.root}: it is "
            f"for {palette.channels}-channel images, the folder's have {channels}"
        )
    base = folder_entry(path, image_size=(h, w), in_channels=in_channels)
    root = base.info.name

    def loader(split: str, *, root: Any = None, seed: int = 0) -> Any:
        return load_folder_pixels(
            base.name, split, image_size=(h, w), palette=palette, in_channels=in_channels,
            seed=seed,
        )  # fmt: skip

    source = own.image_size if own.image_size != (h, w) else None
    resized = f"{source[0]}x{source[1]} -> " if source else ""
    info = PixelInfo(
        name=root,
        vocab_size=palette.size + 1,
        train_size=base.info.train_size,
        test_size=base.info.test_size,
        description=(
            f"{base.info.description}; read as pixel sequences (iGPT): {resized}{h}x{w} images, "
            f"{palette.describe()}, [start={palette.size}] + {h * w} ids in raster order"
        ),
        pad_token_id=None,  # type: ignore[arg-type]  (no padding: equal lengths)
        bos_token_id=palette.size,
        eos_token_id=None,  # type: ignore[arg-type]
        classes=base.info.classes,
        num_labels=len(base.info.classes),
        head="sequence",
        max_length=1 + h * w,
        image_shape=(channels, h, w),
        source_size=source,
        palette=palette.describe(),
    )
    return dataclasses.replace(
        base, task="causal-lm", tasks=_PIXEL_TASKS, info=info, loader=loader, augment=(0, False)
    )


def audio_entry(path: str | os.PathLike) -> DatasetEntry:
    """The user's audio as a catalog entry: a folder of WAV files with one sub-folder per class
    (utterance classification) or a CSV of ``file,transcript`` (CTC over its characters); a
    seeded 10% holdout validates (:mod:`tfam.data.sources.speech`). Reads (and caches) every
    file's features, so a bad file is named here."""
    path = Path(path).expanduser()
    load = audio_folder if path.is_dir() else audio_csv
    info = load(path, "train").info

    def loader(split: str, *, root: Any = None, seed: int = 0) -> Any:
        return load(path, split)

    return DatasetEntry(
        name=str(path),
        task=info.task,
        info=info,
        loader=loader,
        splits=("train", "val"),
        train_split="train",
        test_split=None,
        is_folder=True,
    )


def run_pixels(run: str | os.PathLike) -> tuple[Palette, tuple[int, int, int]] | None:
    """(the palette, the image shape (C, H, W)) a run directory keeps in palette.json (a run
    trained on pixel sequences), else None."""
    path = Path(run).expanduser() / PALETTE_FILE
    if not path.is_file():
        return None
    palette, facts = load_palette(path)
    shape = facts.get("image_shape")
    if not isinstance(shape, list | tuple) or len(shape) != 3:
        raise ValueError(f"{path}: image_shape={shape!r} is invalid: expected [C, H, W]")
    c, h, w = (int(v) for v in shape)
    return palette, (c, h, w)


# The options that read the user's text files (tfam train's --text-column, ...): saved in a
# run's train_args.json, so --resume and tfam eval read the same data.
FILE_OPTIONS = ("text_column", "label_column", "val", "test", "source_lang", "target_lang")
_FAMILY_TASKS: list[Callable[[str], tuple[str, ...]]] = []


def set_family_tasks(lookup: Callable[[str], tuple[str, ...]]) -> None:
    """How :func:`from_files` learns the tasks of a family named by a string (data imports no
    model code; ``import tfam`` sets it from the model registry)."""
    _FAMILY_TASKS[:] = [lookup]


def _family_tasks(family: Any) -> tuple[str, ...] | None:
    if family is None:
        return None
    if isinstance(family, str):
        if not _FAMILY_TASKS:
            raise ValueError(f"family={family!r} cannot be looked up: import tfam first")
        return tuple(_FAMILY_TASKS[0](family))
    return tuple(getattr(family, "tasks", ()))


def from_files(
    path: str | os.PathLike,
    task: str | None = None,
    family: Any = None,
    text_column: str | None = None,
    label_column: str | None = None,
    val: str | os.PathLike | None = None,
    test: str | os.PathLike | None = None,
    *,
    source_lang: str | None = None,
    target_lang: str | None = None,
    tokenizer: Any = None,
) -> DatasetEntry:
    """The user's own text file (CSV, TSV, JSON Lines, CoNLL-U, plain text, or a folder of
    .txt files) as a catalog entry, read for ``task`` (default: what the content says, the
    first a ``family`` (a name such as "gpt", or a model class) can learn); see
    :mod:`tfam.data.sources.files` and :mod:`tfam.data.sources.textfiles`. ``entry.load(split)``
    gives the same datasets ``tfam train --data FILE`` trains on."""
    tasks = _family_tasks(family)
    data = load_user_text(
        path,
        task=task,
        family_tasks=tasks,
        text_column=text_column,
        label_column=label_column,
        val=val,
        test=test,
        source_lang=source_lang,
        target_lang=target_lang,
        tokenizer=tokenizer,
    )
    if tasks is not None and data.task not in tasks:
        shown = family if isinstance(family, str) else getattr(family, "__name__", family)
        raise ValueError(
            f"MODEL {shown!r} cannot learn from {data.path}: it holds data for {data.task}, and "
            f"a {shown} model learns {', '.join(tasks) or 'nothing'}"
        )
    splits = tuple(data.splits)

    def loader(split: str, *, root: Any = None, seed: int = 0) -> Any:
        return data.splits[split]

    return DatasetEntry(
        name=str(data.path),
        task=data.task,
        info=data.info,
        loader=loader,
        splits=splits,
        train_split="train",
        test_split="test" if "test" in splits else None,
        is_folder=True,
    )


def _run_file_options(run: str | os.PathLike) -> dict[str, Any]:
    """The file options, family, task and tokenizer of a run trained on the user's files."""
    run = Path(run).expanduser()
    try:
        saved = json.loads((run / "train_args.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        saved = {}
    saved = saved if isinstance(saved, dict) else {}
    options = {k: saved[k] for k in FILE_OPTIONS if saved.get(k) is not None}
    if saved.get("task"):
        options["task"] = saved["task"]
    if saved.get("family"):
        options["family"] = saved["family"]
    if (run / "tokenizer.json").is_file():
        options["tokenizer"] = str(run)
    return options


def resolve_data(
    spec: str | os.PathLike, *, run: str | os.PathLike | None = None, **options: Any
) -> DatasetEntry:
    """A registered dataset name; else an existing directory read as an image folder, or a
    text file (or a folder of .txt files) read by :func:`from_files` with ``options`` (its
    keywords). ``run``: a run directory trained on that file, whose saved options and tokenizer
    are used (``tfam eval RUN``); an image folder of a run that keeps a palette (palette.json:
    iGPT) is read as that run's pixel sequences (:func:`pixel_folder_entry`)."""
    text = str(spec)
    if _key(text) in _ALIASES:
        return get_dataset(text)
    path = Path(text).expanduser()
    if is_audio_folder(path) or is_audio_csv(path):
        return audio_entry(path)
    if run is not None and is_graph_data(path):
        options = {**_run_file_options(run), **options}
    if is_graph_data(path, options.get("text_column")) and _reads_graphs(options.get("family")):
        return graph_files_entry(path, **options)
    if path.is_dir() and not is_text_folder(path):
        pixels = run_pixels(run) if run is not None else None
        if pixels is not None:
            palette, (c, h, w) = pixels
            return pixel_folder_entry(path, (h, w), palette, in_channels=c)
        return folder_entry(path)
    if path.exists():
        if run is not None:
            options = {**_run_file_options(run), **options}
        return from_files(path, **options)
    raise ValueError(
        f"unknown dataset {text!r}; valid names: {', '.join(_CATALOG)}, or an image folder "
        "(a directory with one sub-folder of images per class), or a text file (CSV, TSV, JSON "
        "Lines, CoNLL-U, .txt) or a folder of .txt files"
    )


_GRAPH_TASKS = ("node-classification", "graph-classification", "graph-regression")


def _reads_graphs(family: Any) -> bool:
    """Whether data holding graphs is read as graphs for ``family``: none named, or one that
    learns a graph task (a text family reads a CSV of SMILES as text)."""
    tasks = _family_tasks(family)
    return tasks is None or any(t in _GRAPH_TASKS for t in tasks)


def graph_files_entry(
    path: str | os.PathLike,
    task: str | None = None,
    family: Any = None,
    text_column: str | None = None,
    label_column: str | None = None,
    val: str | os.PathLike | None = None,
    test: str | os.PathLike | None = None,
    **_: Any,
) -> DatasetEntry:
    """The user's graphs (a CSV of SMILES and a value or label, or a folder with nodes.csv and
    edges.csv: :mod:`tfam.data.sources.graphfiles`) as a catalog entry; ``task`` must be the
    one the data holds."""
    data = load_graph_files(
        path, text_column=text_column, label_column=label_column, val=val, test=test
    )
    if task is not None and task != data.task:
        raise ValueError(
            f"--task {task!r} is invalid for {data.path}: it holds data for {data.task}"
        )
    splits = tuple(data.splits)

    def loader(split: str, *, root: Any = None, seed: int = 0) -> Any:
        return data.splits[split]

    return DatasetEntry(
        name=str(data.path),
        task=data.task,
        info=data.info,  # type: ignore[arg-type]
        loader=loader,
        splits=splits,
        train_split="train",
        val_split="val" if "val" in splits else None,
        test_split="test" if "test" in splits else None,
        is_folder=True,
    )


def dataset_info(name: str) -> DatasetInfo:
    """image_size, in_channels, num_classes, classes, ... of a named dataset; loads nothing."""
    return get_dataset(name).info


def load_dataset(
    name: str | os.PathLike,
    split: str = "train",
    *,
    root: str | os.PathLike | None = None,
    seed: int = 0,
):  # noqa: ANN201  (the entry's dataset type)
    """A split of a named dataset or an image folder. ``root`` is where to look first for
    files (Fashion-MNIST; the digits ship inside scikit-learn); ``seed`` fixes the seeded
    splits (the digits' train/test split, every validation holdout)."""
    return resolve_data(name).load(split, root=root, seed=seed)


def default_augment(
    name: str | DatasetEntry, padding: int | None = None, flip: bool | None = None
) -> BatchAugment:
    """The augmentation tfam trains a dataset with (its catalog entry's ``augment``), with
    ``padding`` or ``flip`` overridden when given. Fill is supplied by the dataset."""
    entry = name if isinstance(name, DatasetEntry) else resolve_data(name)
    default_padding, default_flip = entry.augment
    return BatchAugment(
        padding=default_padding if padding is None else padding,
        flip=default_flip if flip is None else flip,
    )


def _add_family_recipe(name: str, family: str, preset: str) -> None:
    """Give the registered dataset ``name`` a recipe for ``family``: its own recipe's training
    values and threads with ``preset``."""
    entry = _CATALOG[name]
    recipe = dataclasses.replace(entry.recipe, preset=preset, model={})
    recipes = {**entry.family_recipes, family: recipe}
    _CATALOG[name] = dataclasses.replace(entry, family_recipes=recipes)


# ---------------------------------------------------------------------------------------------
# The registered datasets. What each recipe reaches, and how it was chosen, is measured in the
# README ("Measured on this machine") and in benchmarks/ (digits: benchmarks/digits_cv.py).

register_dataset(
    DatasetEntry(
        name="digits",
        task="image-classification",
        info=DIGITS,
        loader=lambda split, root=None, seed=0: load_digits(split, seed=seed),
        recipe=Recipe(
            preset="vit_digits",  # init_std, drop_path, pool, positions, attention live there
            train={
                # 300 epochs over 150: fewer cross-validation errors (benchmarks/digits_cv.py).
                "epochs": 300,
                "batch_size": 128,
                "lr": 2e-3,
                "min_lr": 1e-5,
                # The fit split is 10% smaller than train: stronger decay against overfitting
                # (the model reaches ~100% train accuracy).
                "weight_decay": 0.2,
                "warmup_epochs": 5.0,
                "label_smoothing": 0.1,
                "clip_grad": 1.0,
            },
            # Matmuls this small gain ~1.4x from a second thread on an idle machine but run
            # ~2.5x slower when another process holds the other core (measured, 2-core CPU).
            threads=1,
        ),
        family_recipes={
            "cnn": Recipe(
                preset="resnet_digits",
                train={
                    "epochs": 100,
                    "batch_size": 128,
                    "lr": 3e-3,
                    "min_lr": 1e-5,
                    "weight_decay": 0.05,
                    "warmup_epochs": 5.0,
                    "label_smoothing": 0.1,
                },
                threads=1,
            ),
            # Not tuned: the ViT recipe's schedule on the small Swin (no run measured yet).
            "swin": Recipe(
                preset="swin_digits",
                train={
                    "epochs": 150,
                    "batch_size": 128,
                    "lr": 1e-3,
                    "min_lr": 1e-5,
                    "weight_decay": 0.05,
                    "warmup_epochs": 5.0,
                    "label_smoothing": 0.1,
                    "clip_grad": 1.0,
                },
                threads=1,
                note="swin_digits, the ViT recipe's schedule (untuned)",
            ),
        },
        # Digits are not mirror-symmetric: a 1 px crop, no flips.
        augment=(1, False),
    )
)
# DeiT trains with ViT's recipe, on vit_digits plus the distillation token and head.
_add_family_recipe("digits", "deit", "deit_digits")

register_dataset(
    DatasetEntry(
        name="fashion-mnist",
        task="image-classification",
        info=FASHION_MNIST,
        loader=lambda split, root=None, seed=0: load_fashion_mnist(split, root=root, seed=seed),
        recipe=Recipe(
            preset="vit_fashion_mnist",  # ffn_dim, pool, init_std, sincos2d positions there
            train={
                "epochs": 24,
                "batch_size": 128,
                "lr": 2e-3,
                "min_lr": 1e-5,
                "weight_decay": 0.05,
                "warmup_epochs": 1.0,
                "label_smoothing": 0.1,
                "clip_grad": 1.0,
            },
        ),
        family_recipes={
            # Not tuned: the ViT recipe's schedule (AdamW, cosine, wd 0.05 as the Swin paper)
            # at the Swin paper's peak lr for its batch (benchmarks/bench_swin.py runs it).
            "swin": Recipe(
                preset="swin_fashion_mnist",
                train={
                    "epochs": 24,
                    "batch_size": 128,
                    "lr": 1e-3,
                    "min_lr": 1e-5,
                    "weight_decay": 0.05,
                    "warmup_epochs": 1.0,
                    "label_smoothing": 0.1,
                    "clip_grad": 1.0,
                },
                note="swin_fashion_mnist, the ViT recipe's schedule at lr 1e-3 (untuned)",
            ),
            # The calibration ResNet (plain PyTorch, 0.31 M parameters, the same lr, decay,
            # smoothing and augmentation) reached 92.63% in 8 epochs, still rising; this one
            # trains 20 epochs, the cosine fitted to 40 minutes should the machine be slower
            # (max_minutes).
            "cnn": Recipe(
                preset="resnet_fashion_mnist",
                train={
                    "epochs": 20,
                    "batch_size": 128,
                    "lr": 3e-3,
                    "min_lr": 1e-5,
                    "weight_decay": 0.05,
                    "warmup_epochs": 1.0,
                    "label_smoothing": 0.1,
                    "max_minutes": 40.0,
                },
                threads=2,
            ),
        },
        # A 1 px crop and flips. A 2 px crop moves content across the 4 px patch grid and slows
        # the ViT most (test accuracy after epoch 1: 72.6% with 2 px crop + flip, 79.5% flips
        # only); flips alone overfit (24 epochs: 89.47% test at 93.9% train); a 1 px crop +
        # flips reached 89.83% at 90.1% train (learned position table, 24 epochs, measured on
        # this 2-core machine; with sine-cosine positions now: 91.65% at 92.7% train).
        augment=(1, True),
    )
)
# DeiT trains with ViT's recipe (not tuned for DeiT), on vit_fashion_mnist plus the
# distillation token and head; `tfam train deit --teacher RUN` distils from RUN.
_add_family_recipe("fashion-mnist", "deit", "deit_fashion_mnist")


# Text: sequence to sequence. Splits are train / val / test (val and test are whole held-out
# books for kjv-rv; see tfam.data.sources.seq2seq); the tokenizer comes with the dataset (.tokenizer).
# The kjv-rv recipe is a modest start, not a tuned one.

register_dataset(
    DatasetEntry(
        name="kjv-rv",
        task="seq2seq",
        info=TextDatasetInfo(
            name="kjv-rv",
            vocab_size=KJV_RV_VOCAB,
            train_size=27565,
            test_size=3016,
            description=(
                "King James Version (English) -> Reina-Valera 1909 (Spanish), aligned by verse, "
                "from the Debian packages sword-text-kjv and sword-text-sparv; val: Ruth, "
                "Ecclesiastes, Jonah, Galatians; test: Joshua, Proverbs, Acts, 1 Corinthians; "
                f"joint BPE of {KJV_RV_VOCAB} ids"
            ),
        ),
        loader=lambda split, root=None, seed=0: load_kjv_rv(split),
        recipe=Recipe(
            preset="transformer_tiny",
            train={
                "epochs": 40,
                "max_minutes": 60.0,  # the budget on 2 CPU cores; epochs is a ceiling
                "batch_tokens": 4096,
                "lr": 2e-3,
                "schedule": "inverse_sqrt",
                "warmup_steps": 400,
                "weight_decay": 0.0,
                "betas": (0.9, 0.98),
                "label_smoothing": 0.1,
                "clip_grad": 1.0,
            },
            note="paper-style Adam betas, inverse-sqrt schedule, label smoothing 0.1; 60 minutes",
        ),
        splits=TEXT_SPLITS,
        train_split="train",
        aliases=("kjv-rv1909",),
    )
)

for _task, _what in (("copy", "the same"), ("reverse", "reversed")):
    register_dataset(
        DatasetEntry(
            name=_task,
            task="seq2seq",
            info=TextDatasetInfo(
                name=_task,
                vocab_size=4 + len(SYMBOLS),
                train_size=SYMBOL_SIZES["train"],
                test_size=SYMBOL_SIZES["test"],
                description=(
                    f"synthetic: random sequences of 3-12 of {len(SYMBOLS)} symbols -> {_what}; "
                    "fixed seeds per split (a quick sanity task)"
                ),
            ),
            # The split seeds are fixed on purpose: a run's --seed must not change the data.
            loader=lambda split, root=None, seed=0, _task=_task: load_symbol_task(_task, split),
            recipe=Recipe(
                preset="transformer_tiny",
                # 20 ids and 14 positions: a smaller model learns it in a minute or two on CPU.
                model={
                    "dim": 64,
                    "heads": 4,
                    "depth": 2,
                    "ffn_dim": 256,
                    "max_positions": 32,
                    "dropout": 0.0,
                },
                train={
                    "epochs": 10,
                    "batch_size": 64,
                    "lr": 1e-3,
                    "warmup_steps": 200,
                    "weight_decay": 0.0,
                    "label_smoothing": 0.0,
                    "clip_grad": 1.0,
                },
                threads=1,
            ),
            splits=TEXT_SPLITS,
            train_split="train",
        )
    )


# Text: classification and language modelling. Splits are train / val / test, each fixed (the
# run's --seed changes none of them; see each module). These recipes are reasoned starting
# points (the usual BERT fine-tuning values; a small character GPT), not yet measured here.


def _minilm_fine_tune(
    entry: dict[str, Any], *, epochs: int, lr: float, warmup_steps: int, note: str
) -> DatasetEntry:
    """A text dataset fine-tuned from the packaged MiniLM (the head starts fresh), with BERT's
    recipe around the few numbers that differ: batch 32, weight decay 0.01, warmup over
    ``warmup_steps`` (~10% of the steps) and down to a learning rate of 0, clipping at 1."""
    train = {
        "init": "minilm_l6",
        "epochs": epochs,
        "batch_size": 32,
        "lr": lr,
        "min_lr": 0.0,
        "weight_decay": 0.01,
        "warmup_steps": warmup_steps,
        "label_smoothing": 0.0,
        "clip_grad": 1.0,
        "eval_batch_size": 256,
    }
    recipe = Recipe(preset="minilm_l6", train=train, note=note)
    return DatasetEntry(**entry, recipe=recipe, splits=TEXT_SPLITS, train_split="train")


register_dataset(
    _minilm_fine_tune(
        {
            "name": "sentiment",
            "task": "sequence-classification",
            "info": SENTIMENT_INFO,
            "loader": lambda split, root=None, seed=0: load_sentiment(split, root=root),
            "aliases": ("movie-reviews",),
            "tasks": ("sequence-classification", "masked-lm"),
        },
        epochs=3,
        lr=5e-5,
        warmup_steps=80,  # ~10% of the 793 steps of 3 epochs
        note="fine-tune the packaged MiniLM: lr 5e-5, 3 epochs, 10% warmup (BERT's recipe)",
    )
)

register_dataset(
    _minilm_fine_tune(
        {
            "name": "turkish-pos",
            "task": "token-classification",
            "info": TURKISH_POS_INFO,
            "loader": lambda split, root=None, seed=0: load_turkish_pos(split),
            "aliases": ("pos",),
        },
        epochs=5,
        # Higher than for sentiment: an English vocabulary cuts Turkish into many short pieces,
        # far from what the encoder was trained on.
        lr=1e-4,
        warmup_steps=60,  # ~10% of the 610 steps of 5 epochs
        note="fine-tune the packaged MiniLM as a tagger: lr 1e-4, 5 epochs",
    )
)

register_dataset(
    DatasetEntry(
        name="kjv",
        task="causal-lm",
        info=KJV_CHARS_INFO,
        loader=lambda split, root=None, seed=0: load_kjv_chars(split),
        recipe=Recipe(
            preset="gpt_char_small",  # context 128 = the dataset's default windows
            # One pass over the training books in small batches (1,946 steps): more steps beat
            # bigger batches at this compute. lr chosen on validation loss from 2e-3 and 4e-3
            # (one epoch each, batch 16); max_minutes caps slower machines at the budget.
            train={
                "epochs": 1,
                "max_minutes": 5.0,
                "batch_size": 16,
                "lr": 4e-3,
                "min_lr": 1e-4,
                "weight_decay": 0.1,
                "betas": (0.9, 0.99),
                "warmup_steps": 100,
                "label_smoothing": 0.0,
                "clip_grad": 1.0,
                "eval_batch_size": 256,
            },
            note="a small character GPT: one epoch of batch 16 windows of 128, lr 4e-3, 5 minutes",
        ),
        splits=TEXT_SPLITS,
        train_split="train",
    )
)


# Speech: the spoken digits (tfam.data.sources.spoken_digits, synthesised once with eSpeak NG),
# as log-mel frames. Three tasks on one corpus: a label per 10 ms frame (tag: --labels word or
# phoneme), the speaker (one label per utterance) and the digit string (transcribe: CTC). Tag
# and transcribe are tested on held-out voices, speaker on held-out utterances of the training
# voices; each recipe fits 45 minutes on 2 CPU cores (max_minutes 40 plans the schedule; the
# final evaluation and loading fit the rest). Reasoned starting points, not tuned here.
_SPEECH_TRAIN = {
    "epochs": 40,
    "max_minutes": 40.0,
    "batch_tokens": 8000,  # frames of padded batches (~20 utterances of 4 s), sorted by length
    "eval_batch_tokens": 32000,
    "lr": 1e-3,
    "min_lr": 1e-5,
    "weight_decay": 0.05,
    "warmup_epochs": 2.0,
    "label_smoothing": 0.0,
    "clip_grad": 1.0,
}
_SPEECH_RECIPES = {
    "frame-classification": Recipe(
        preset="speech_digits_tag", train=_SPEECH_TRAIN, threads=2,
        note="speech_digits_tag: 2x subsampling, local attention +-16 frames; 40 minutes",
    ),
    "utterance-classification": Recipe(
        preset="speech_digits_speaker",
        train={**_SPEECH_TRAIN, "epochs": 80, "label_smoothing": 0.1},
        threads=2, note="speech_digits_speaker: 4x subsampling, mean pool, 80 epochs; 40 minutes",
    ),
    "ctc": Recipe(
        preset="speech_digits_ctc", train=_SPEECH_TRAIN, threads=2,
        note="speech_digits_ctc: 2x subsampling, CTC, greedy decoding; 40 minutes",
    ),
}  # fmt: skip


def _spoken_digits_for(
    entry: DatasetEntry, task: str, labels: str | None = None, root: Any = None
) -> DatasetEntry:
    """The spoken digits for ``task`` (and, tagging, ``labels``: word or phoneme), the facts
    (speaker voices, phonemes) read from the corpus at ``root`` (default: the cached one)."""
    if labels is not None and task != "frame-classification":
        raise ValueError(
            f"--labels {labels!r} is invalid for this task: it chooses what each frame is "
            "labelled with (--task tag)"
        )
    if labels is not None and labels not in LABEL_KINDS:
        raise ValueError(
            f"--labels {labels!r} is invalid: expected one of {', '.join(LABEL_KINDS)}"
        )
    info = spoken_digits_info(task, labels, root)
    corpus = root

    def loader(split: str, *, root: Any = None, seed: int = 0) -> Any:
        return spoken_digits(split, task, labels, root=root if root is not None else corpus)

    recipe = _SPEECH_RECIPES[task]
    return dataclasses.replace(
        entry, info=info, loader=loader, recipe=recipe, family_recipes={"speech": recipe},
        specialize=None,
    )  # fmt: skip


register_dataset(
    DatasetEntry(
        name="spoken-digits",
        task="frame-classification",
        info=spoken_digits_info("frame-classification", "word"),
        loader=lambda split, root=None, seed=0: spoken_digits(
            split, "frame-classification", root=root
        ),
        recipe=_SPEECH_RECIPES["frame-classification"],
        splits=("train", "val", "test"),
        train_split="train",
        tasks=tuple(_SPEECH_RECIPES),
        aliases=("digits-speech",),
        specialize=_spoken_digits_for,
    )
)


# Images as pixel sequences (iGPT, Chen et al. 2020): the image datasets' splits and seeds, each
# image its palette ids after a start token (tfam.data.sources.pixels), the labels kept: the
# default task pre-trains by next-pixel prediction; --task classify fine-tunes (with --init, the
# pre-trained run). A run keeps its palette in palette.json (`tfam generate RUN` completes
# held-out images with it).

register_dataset(
    DatasetEntry(
        name="digits-pixels",
        task="causal-lm",
        info=pixels_info("digits"),
        loader=lambda split, root=None, seed=0: load_pixels("digits", split, seed=seed),
        recipe=Recipe(
            preset="igpt_digits",
            train={
                "epochs": 30,
                "batch_size": 64,
                "lr": 2e-3,
                "min_lr": 1e-5,
                "weight_decay": 0.05,
                "warmup_epochs": 3.0,
                "label_smoothing": 0.0,
                "clip_grad": 1.0,
            },
            threads=1,
            note="an iGPT on the 8x8 digits, 17 grey levels (exact): next-pixel prediction",
        ),
        tasks=_PIXEL_TASKS,
        aliases=("digits-igpt",),
    )
)

register_dataset(
    DatasetEntry(
        name="fashion-mnist-pixels",
        task="causal-lm",
        info=pixels_info("fashion-mnist"),
        loader=lambda split, root=None, seed=0: load_pixels(
            "fashion-mnist", split, root=root, seed=seed
        ),
        recipe=Recipe(
            preset="igpt_fashion_mnist",
            train={
                "epochs": 5,
                "max_minutes": 30.0,
                "batch_size": 64,
                "lr": 1e-3,
                "min_lr": 1e-5,
                "weight_decay": 0.05,
                "warmup_epochs": 0.2,
                "label_smoothing": 0.0,
                "clip_grad": 1.0,
                "eval_batch_size": 500,
            },
            note="an iGPT on Fashion-MNIST at 14x14, 16 grey levels; 30 minutes at most",
        ),
        tasks=_PIXEL_TASKS,
        aliases=("fashion-mnist-igpt",),
    )
)


# Graphs (the graph family): a node is a vector, attention runs only along edges. Splits:
# karate's 4 labelled members are drawn by the run's --seed (seeded=True); nci-tpsa holds out a
# fixed fifth.

register_dataset(
    DatasetEntry(
        name="karate",
        task="node-classification",
        info=KARATE_INFO,  # type: ignore[arg-type]
        loader=lambda split, root=None, seed=0: load_karate(split, seed=seed),
        recipe=Recipe(
            preset="graph_karate",
            # One graph, 4 labels: full-batch steps; weight decay keeps the 30 unlabelled
            # members' identity vectors small, so their neighbours decide their side.
            train={
                "epochs": 200,
                "batch_size": 1,
                "lr": 1e-2,
                "min_lr": 1e-4,
                "weight_decay": 0.05,
                "warmup_epochs": 10.0,
                "label_smoothing": 0.0,
                "clip_grad": 1.0,
            },
            threads=1,
            note="node classification from 4 labelled members, 200 full-graph steps",
        ),
        splits=("train", "test"),
        train_split="train",
        val_split=None,
        test_split="test",
        aliases=("karate-club",),
        seeded=True,
    )
)

register_dataset(
    DatasetEntry(
        name="nci-tpsa",
        task="graph-regression",
        info=nci_tpsa_info(),  # type: ignore[arg-type]
        loader=lambda split, root=None, seed=0: load_nci_tpsa(split, seed=seed),
        recipe=Recipe(
            preset="graph_nci_tpsa",
            train={
                "epochs": 40,
                "batch_size": 32,
                "lr": 1e-3,
                "min_lr": 1e-5,
                "weight_decay": 0.01,
                "warmup_epochs": 1.0,
                "clip_grad": 1.0,
                "max_minutes": 12.0,
            },
            threads=1,
            note="graph regression of TPSA (Å²) under the graph mask; 12 minutes at most",
        ),
        splits=NCI_SPLITS,
        aliases=("tpsa",),
    )
)


# Long Range Arena-style tasks (Tay et al. 2020) that tfam generates or cuts itself (none is LRA's
# data; each module says how it differs): sequences of ids after <cls>, one label each, for a
# BERT-style encoder with any attention kernel (benchmarks/bench_long_sequences.py trains every
# kernel on them). The recipe is a small encoder in LRA's shape (CLS pooling), not tuned here.
def _lra_recipe(max_positions: int, note: str) -> Recipe:
    return Recipe(
        preset="bert_base",
        model={
            "dim": 64,
            "depth": 2,
            "heads": 4,
            "ffn_dim": 128,
            "max_positions": max_positions,
            "dropout": 0.1,
            "attn_dropout": 0.0,  # the approximate and chunked kernels refuse attention dropout
        },
        train={
            "epochs": 5,
            "batch_size": 32,
            "lr": 1e-3,
            "min_lr": 1e-5,
            "weight_decay": 0.01,
            "warmup_epochs": 0.5,
            "label_smoothing": 0.0,
            "clip_grad": 1.0,
            "max_minutes": 30.0,
        },
        note=note,
    )


for _name, _info, _load, _max in (
    ("listops", LISTOPS_INFO, load_listops, 1000),
    ("lra-text", BYTETEXT_INFO, load_bytetext, 1001),
    ("pathfinder32", PATHFINDER_INFO, load_pathfinder, 1025),
):
    register_dataset(
        DatasetEntry(
            name=_name,
            task="sequence-classification",
            info=_info,
            loader=lambda split, root=None, seed=0, _load=_load: _load(split),
            recipe=_lra_recipe(_max, f"a small LRA-shaped encoder (D=64, 2 blocks) on {_name}"),
            splits=TEXT_SPLITS,
            train_split="train",
        )
    )
