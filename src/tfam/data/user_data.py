"""The user's own data as catalog entries: image folders (also read as pixel sequences for
iGPT), audio folders and CSVs, text files (CSV, TSV, JSON Lines, CoNLL-U, .txt) and graph
files, and :func:`resolve_data`, which turns a `--data` value (a registered name or a path)
into an entry. See docs/data.md.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tfam.data.registry import DatasetEntry, get_dataset, is_registered, list_datasets
from tfam.data.sources.files import load_user_text
from tfam.data.sources.folder import FOLDER_VAL_FRACTION, ImageFolder, scan_folder
from tfam.data.sources.graphfiles import is_graph_data, load_graph_files
from tfam.data.sources.images import (
    DatasetInfo,
)
from tfam.data.sources.pixels import PixelInfo, load_folder_pixels
from tfam.data.sources.speech import (
    audio_csv,
    audio_folder,
    is_audio_csv,
    is_audio_folder,
)
from tfam.data.sources.textfiles import is_text_folder
from tfam.data.vision.palette import PALETTE_FILE, Palette, load_palette


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
PIXEL_TASKS = ("causal-lm", "sequence-classification")


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
        base, task="causal-lm", tasks=PIXEL_TASKS, info=info, loader=loader, augment=(0, False)
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
    return _loaded_entry(data)


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
    if is_registered(text):
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
        f"unknown dataset {text!r}; valid names: {', '.join(list_datasets())}, or an image folder "
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
    return _loaded_entry(data)


def _loaded_entry(data: Any) -> DatasetEntry:
    """The entry of the user's data already read (``data.path``, ``task``, ``info`` and
    ``splits``: split name -> dataset; a fit split named "train", "val" and "test" when given)."""
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
        val_split="val" if "val" in splits else None,
        test_split="test" if "test" in splits else None,
        is_folder=True,
    )
