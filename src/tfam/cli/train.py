"""`tfam train MODEL --data NAME_OR_DIR`: train a model into a run directory.

The training options are the fields of :class:`tfam.training.TrainConfig` (name, type, default
and help from the dataclass: one source of truth, validated there); datasets, their recipes and
augmentation come from the catalog (:mod:`tfam.data.catalog`), families from the model
registry. Nothing here names a family or a dataset.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from tfam.cli.common import (
    add_command,
    add_dataclass_options,
    check_threads,
    field_option,
    none_as_text,
    option_error,
    parse_sets,
    resolve_model,
)
from tfam.cli.train_help import (  # noqa: F401  (DATASET_DEFAULTS: re-exported)
    DATASET_DEFAULTS,
    EPILOG_HEAD,
    EPILOG_TAIL,
    objective,
    recipes_text,
)
from tfam.cli.train_options import (
    AUGMENT_OPTIONS,
    DISTILL_OPTIONS,
    add_augmentation_options,
    add_distillation_options,
    add_file_options,
    distillation,
    load_teacher,
)
from tfam.runs import TOKENIZER_FILE, save_tokenizer, tokenizer_bytes

# TrainConfig fields a resumed run does not take from the saved run: they say how this
# invocation stops, talks or where it computes, not what it computes.
PER_INVOCATION = frozenset(
    {"max_steps", "max_minutes", "quiet", "progress", "device", "num_workers", "init"}
)

# Settings of the command line itself (not TrainConfig fields) that a resumed run keeps.
_RUN_SETTINGS = (
    "preset",
    "data_root",
    "pad",
    "flip",
    "erase",
    "mixup",
    "cutmix",
    "no_augment",
    "train_subset",
    "threads",
    "labels",
    *("teacher", "distillation", "distill_alpha", "distill_tau", "teacher_cache"),
)


def _train_config_class() -> type:
    from tfam.training import TrainConfig

    return TrainConfig


def _trainable_families(task: str | None = None) -> list[str]:
    """Families that declare the task (a model class's ``tasks``); all trainable ones without."""
    from tfam.models import MODEL_CLASSES

    return sorted(
        family
        for family, cls in MODEL_CLASSES.items()
        if (task in cls.tasks if task else cls.tasks)
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    from tfam.data import list_datasets

    datasets = ", ".join(list_datasets())
    p = add_command(
        subparsers,
        "train",
        help=f"train a model on a dataset ({datasets}) or your image folder",
        description=(
            "Train a model on a dataset that works offline or on your own image folder, with "
            "AdamW, warmup + cosine schedule, augmentation, per-epoch validation, and exact "
            "kill/resume."
        ),
        epilog=EPILOG_HEAD + recipes_text() + "\n" + EPILOG_TAIL,
    )
    p.add_argument(
        "family",
        metavar="MODEL",
        help=f"model family to train: {', '.join(_trainable_families())}",
    )
    p.add_argument(
        "--data",
        default=None,
        metavar="NAME_OR_DIR",
        help=f"dataset: {datasets}, or an image folder (one sub-folder per class), or your "
        "text file (CSV, TSV, JSON Lines, CoNLL-U, .txt, or a folder of .txt; docs/data.md)",
    )
    p.add_argument(
        "--task",
        default=None,
        metavar="NAME",
        help="the objective, where the data allows several (classify, tag, mlm, clm, "
        "translate; default: the data set's first, see below); without --data, a data set "
        "name: tfam train bert --task sentiment is --data sentiment",
    )
    p.add_argument(
        "--labels",
        default=None,
        metavar="KIND",
        help="spoken-digits --task tag: what each 10 ms frame is labelled with, word (the "
        "digit or silence; default) or phoneme",
    )
    p.add_argument(
        "--data-root", metavar="DIR", default=None, help="where to look first for dataset files"
    )
    p.add_argument(
        "--preset",
        metavar="NAME",
        default=None,
        help="model preset (default: the dataset's, see below; see `tfam list`)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        metavar="KEY=VALUE",
        default=None,
        help="override a model config field, repeatable: --set dim=64 --set depth=4",
    )
    g = p.add_argument_group("training (TrainConfig fields; defaults per dataset, see below)")
    add_dataclass_options(g, _train_config_class())
    add_augmentation_options(p)
    add_file_options(p)
    add_distillation_options(p)
    r = p.add_argument_group("run")
    r.add_argument(
        "--out", metavar="DIR", default=None, help="run directory (default: runs/<dataset>)"
    )
    r.add_argument("--resume", action="store_true", help="continue (or extend) the run in --out")
    r.add_argument(
        "--threads",
        type=int,
        metavar="N",
        default=None,
        help="torch CPU threads, 1..4 per core (default: per dataset; else torch's choice)",
    )
    r.add_argument(
        "--nproc",
        type=int,
        metavar="N",
        default=None,
        help="run N processes with DDP through torchrun (same as torchrun --nproc_per_node N "
        "-m tfam train ...)",
    )
    p.set_defaults(func=run)


def _file_options(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """--text-column, --label-column, --val, --test, --source-lang, --target-lang as given,
    else (--resume) the run's saved ones."""
    from tfam.data.catalog import FILE_OPTIONS

    saved = _saved(out) if args.resume else {}
    return {
        k: getattr(args, k) if getattr(args, k, None) is not None else saved.get(k)
        for k in FILE_OPTIONS
    }


def parse_override(text: str) -> tuple[str, Any]:
    """``"dim=64"`` -> ("dim", 64): the one ``--set`` parser (:func:`tfam.cli.common.parse_set`)."""
    from tfam.cli.common import parse_set

    return parse_set(text)


def _check_family(family: str, task: str) -> None:
    valid = _trainable_families(task)
    if family not in valid:
        raise ValueError(f"MODEL {family!r} is invalid: expected one of {', '.join(valid)}")


def _data_spec(args: argparse.Namespace) -> tuple[str, str | None]:
    """(--data, --task) as given -> (the data to learn from, the objective asked or None).
    Today's spelling ``--task sentiment`` (a data set name, no --data) is --data sentiment."""
    from tfam.data import get_dataset, list_datasets

    if args.data is not None:
        return args.data, args.task
    if args.task is not None:
        try:
            get_dataset(args.task)
        except ValueError:
            raise ValueError(
                f"--task {args.task!r} needs --data: the data set to learn from "
                f"({', '.join(list_datasets())}, or an image folder); --task names the "
                "objective where the data allows several"
            ) from None
        return args.task, None
    raise ValueError(
        "--data is required: a data set to learn from "
        f"({', '.join(list_datasets())}), or an image folder (one sub-folder per class)"
    )


def _task_name(asked: str | None, entry: Any, saved: dict[str, Any] | None) -> str:
    """The run's task (a TASKS name): --task (an objective the data allows, by its short or
    full name), else the resumed run's, else the data set's default (``entry.task``)."""
    if asked is None:
        return str((saved or {}).get("task") or entry.task)
    for task in entry.tasks:
        if asked in (task, objective(task)):
            return task
    shown = entry.name if not entry.is_folder else entry.info.name
    valid = ", ".join(objective(t) for t in entry.tasks)
    raise ValueError(f"--task {asked!r} is invalid for --data {shown}: expected one of {valid}")


def _resolve_data(
    spec: str, family: str, task: str | None, files: dict[str, Any], tokenizer: str | None
) -> Any:
    """The catalog entry of --data; your own text file is read for ``task`` (else what its
    content and MODEL say) with the file options, and ``tokenizer`` (a run or a pretrained
    start) instead of a trained one when it has one."""
    from tfam.data import list_datasets, resolve_data
    from tfam.data.sources.textfiles import is_text_folder

    path = Path(spec).expanduser()
    is_file = not _is_catalog(spec) and (path.is_file() or is_text_folder(path))
    if not is_file:
        given = [f"--{k.replace('_', '-')}" for k, v in files.items() if v is not None]
        if given:
            raise ValueError(
                f"{given[0]} is invalid for --data {spec}: it reads your own text files "
                "(CSV, TSV, JSON Lines, CoNLL-U, .txt)"
            )
        try:
            return resolve_data(spec)
        except ValueError as err:
            if str(err).startswith("unknown dataset"):
                raise ValueError(
                    f"--data {spec!r} is invalid: expected one of {', '.join(list_datasets())}, "
                    "an image folder (a directory with one sub-folder of images per class), or "
                    "a text file (CSV, TSV, JSON Lines, CoNLL-U, .txt) or folder of .txt files"
                ) from None
            raise
    return resolve_data(spec, family=family, task=task, tokenizer=tokenizer, **files)


def _is_catalog(spec: str) -> bool:
    from tfam.data import get_dataset

    try:
        get_dataset(spec)
    except ValueError:
        return False
    return True


def _train_values(
    args: argparse.Namespace, saved: dict[str, Any] | None, entry: Any, sizing: Any = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """TrainConfig values: the command line, else the resumed run's, else the sizing from the
    user's data (``sizing.train``), else the dataset's recipe (else the dataclass default, by
    leaving the field out); and where each value came from."""
    cls = _train_config_class()
    saved_train = (saved or {}).get("train_config") or {}
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for f in dataclasses.fields(cls):
        if hasattr(args, f.name):  # given on the command line (None included: `--x none`)
            values[f.name] = getattr(args, f.name)
        elif f.name in saved_train and f.name not in PER_INVOCATION:
            values[f.name] = saved_train[f.name]
            sources[f.name] = f"the resumed run ({args.out}/train_args.json)"
        elif sizing is not None and f.name in sizing.train:
            values[f.name] = sizing.train[f.name]
            sources[f.name] = "the sizing from the data"
        elif f.name in entry.recipe.train:
            values[f.name] = entry.recipe.train[f.name]
            sources[f.name] = f"the {entry.name} recipe"
    recipe_warmup = entry.recipe.train.get("warmup_epochs")
    if sources.get("warmup_epochs", "").endswith("recipe") and "epochs" in values:
        # The recipe's warmup is meant for its own length; a shorter run warms up for a tenth
        # of its epochs at most, so it still gets its cosine decay.
        values["warmup_epochs"] = min(recipe_warmup, values["epochs"] / 10)
    recipe_steps = entry.recipe.train.get("warmup_steps")
    if recipe_steps and sources.get("warmup_steps", "").endswith("recipe"):
        # A recipe's warmup in steps is a share (~10%) of its own run's steps: a run with
        # fewer epochs or larger batches (fewer steps) keeps that share, never more steps.
        share = 1.0
        recipe_epochs = entry.recipe.train.get("epochs")
        if recipe_epochs and values.get("epochs"):
            share *= values["epochs"] / recipe_epochs
        recipe_batch = entry.recipe.train.get("batch_size")
        if recipe_batch and values.get("batch_size") and not values.get("batch_tokens"):
            share *= recipe_batch / values["batch_size"]
        if share < 1:
            values["warmup_steps"] = max(1, round(recipe_steps * share))
    return values, sources


def _settings(args: argparse.Namespace, saved: dict[str, Any] | None, entry: Any) -> dict[str, Any]:
    """The command line's own settings (preset, augmentation, threads, --set), else the
    resumed run's."""
    settings: dict[str, Any] = {}
    for name in _RUN_SETTINGS:
        given = getattr(args, name)
        settings[name] = given if given is not None else (saved or {}).get(name)
    if args.overrides is not None:
        from tfam.config import config_class

        settings["overrides"] = none_as_text(parse_sets(args.overrides), config_class(args.family))
    else:
        settings["overrides"] = dict((saved or {}).get("overrides") or {})
    if settings["threads"] is None:
        settings["threads"] = entry.recipe.threads
    return settings


def _preset(settings: dict[str, Any], family: str, entry: Any, init: str | None = None) -> str:
    """The model to build: --preset (checked), else --init's architecture (a preset: that
    preset; a run or model directory: the family, built from its config.json by
    :func:`_model_values`), else the recipe's preset when it is of this family, else the
    family's own defaults."""
    from tfam.models import PRESETS

    if settings["preset"] is not None:
        source = resolve_model(settings["preset"], what="--preset", kinds=("preset",))
        if source.family != family:
            raise ValueError(
                f"--preset {source.name!r} is a {source.family!r} model, but MODEL is {family!r}"
            )
        return source.name
    if init is not None:
        source = resolve_model(init, what="--init")
        if source.family != family:
            raise ValueError(
                f"--init {init!r} is a {source.family!r} model, but MODEL is {family!r}: "
                f"fine-tune it as `tfam train {source.family} ...`, or give --preset"
            )
        return source.name if source.kind == "preset" else family
    recipe = entry.recipe.preset
    if recipe in PRESETS and PRESETS[recipe].family == family:
        return recipe
    return family


def _built_from(init: str | None, saved: dict[str, Any] | None) -> str | None:
    """The --init whose architecture the model is built from: this command's, else (resuming)
    the one the run was started with (--init itself is per invocation: the weights come from
    the checkpoint, the architecture must not change)."""
    if init is not None or saved is None:
        return init
    value = ((saved.get("train_config") or {}).get("init")) or None
    return str(value) if value is not None else None


def _init_architecture(init: str | None, preset: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The config fields of --init RUN (a run or model directory, without --preset): its
    config.json, so the new run is built as RUN was; {} otherwise."""
    from tfam.runs import read_config

    if init is None or settings["preset"] is not None or not Path(init).is_dir():
        return {}
    values = read_config(Path(init)).to_dict()
    values.pop("family", None)
    return values


def _model_values(
    settings: dict[str, Any],
    entry: Any,
    preset: str,
    task: str,
    init: str | None = None,
    sizing: Any = None,
) -> dict[str, Any]:
    """Config fields for create_model: --init RUN's config.json (see :func:`_preset`) or the
    recipe's extras (or the sizing from the user's data), the data's facts for the task (image size, channels, classes, vocabulary),
    then --set."""
    from tfam.data import task_facts

    facts = task_facts(entry, task)
    overrides = settings["overrides"]
    shown = entry.name if not entry.is_folder else entry.info.name
    for key, fact in facts.items():
        if key in overrides and overrides[key] not in (fact, [fact, fact], (fact, fact)):
            needs = "its images need" if _has_images(entry) else "its data needs"
            raise ValueError(
                f"--set {key}={overrides[key]!r} is invalid for --data {shown}: {needs} "
                f"{key}={fact!r}"
            )
    base = _init_architecture(init, preset, settings)
    if "head" in facts and base.get("head", facts["head"]) != facts["head"]:
        # A new head (a masked-LM run fine-tuned to classify): the pooler follows it (BERT's
        # sequence head reads the pooled [CLS]) unless --set says otherwise.
        base.pop("pooler", None)
    if init is not None and "vocab_size" in facts and "vocab_size" not in overrides:
        from tfam.models import create_config

        theirs = base.get("vocab_size") if base else None
        if theirs is None and not Path(init).is_dir():
            theirs = getattr(create_config(preset), "vocab_size", None)
        if theirs is not None and theirs != facts["vocab_size"]:
            raise ValueError(
                f"--init {init!r} is invalid for --data {shown}: its vocabulary has {theirs} "
                f"tokens, the data's tokenizer {facts['vocab_size']}; its token embeddings "
                "would not mean this data's ids (fine-tune on data tokenized as it was)"
            )
    recipe_model = dict(entry.recipe.model) if preset == entry.recipe.preset else {}
    sized = dict(sizing.model) if sizing is not None else {}
    return {**base, **recipe_model, **sized, **facts, **overrides}


def _has_images(entry: Any) -> bool:
    """Whether a dataset holds images (augmentation and preprocess.json apply)."""
    return getattr(entry.info, "image_size", None) is not None


def _augment(entry: Any, settings: dict[str, Any]) -> Any:
    """The batch augmentation of an image dataset (None: none); --pad/--flip on other data
    is an error rather than silently ignored."""
    import tfam.data

    pixels = getattr(entry.info, "image_shape", None)  # pixel sequences (iGPT): (C, H, W)
    if not _has_images(entry) and pixels is None:
        given = [opt for key, opt in AUGMENT_OPTIONS.values() if settings[key]]
        if given:
            raise ValueError(
                f"{given[0]} is invalid for --data {entry.name}: augmentation is for image data "
                "(images or pixel sequences)"
            )
        return None
    if pixels is not None:
        for key, why in (("erase", "noise"), ("mixup", "a blend"), ("cutmix", "a mixed label")):
            if settings[key]:
                raise ValueError(
                    f"--{key} {settings[key]:g} is invalid for --data {entry.name}: pixel "
                    f"sequences hold palette ids, and {why} is no id (--pad and --flip move "
                    "whole pixels)"
                )
    if settings["no_augment"]:
        return None
    try:
        # Looked up on the module at call time (tests spy on it).
        given = {field: settings[key] for field, (key, _) in AUGMENT_OPTIONS.items()}
        augment = tfam.data.default_augment(entry, **given)
        augment.check_image_size(entry.info.image_size if pixels is None else tuple(pixels[1:]))
    except ValueError as err:
        options = {field: opt for field, (_, opt) in AUGMENT_OPTIONS.items()}
        raise option_error(err, options) from None
    return augment  # pixel sequences move their ids (PixelDataset.augment_ids)


# What one item of a text dataset is, when it is not the task's unit (a tagger's loss counts
# tokens, but its dataset holds sentences).
_ITEM_NOUNS = {
    "sequence-classification": "sentences",
    "token-classification": "sentences",
    "masked-lm": "sentences",
}


def _items(dataset: Any, task: Any) -> str:
    """The noun after the split sizes of the summary line: what :func:`_size` counts."""
    if getattr(dataset, "image_shape", None) is not None:
        return "images"  # pixel sequences (iGPT), whatever the task
    if task.name == "causal-lm":
        context = getattr(dataset, "context", None)
        return f"windows of {context} {task.unit}" if context else "windows"
    if task.name == "node-classification":
        return "labelled nodes"  # one graph: a split is the nodes it scores
    # A dataset that says what its items are (utterances of a frame tagger, molecules).
    return getattr(dataset, "item_noun", None) or _ITEM_NOUNS.get(task.name, task.unit)


def _size(dataset: Any, task: Any) -> int:
    """A split's size for the summary line: its items, or a node classifier's labelled nodes
    (karate: 4 train / 30 test, in one graph)."""
    if task.name == "node-classification" and hasattr(dataset, "labelled_nodes"):
        return int(dataset.labelled_nodes())
    return len(dataset)


def _check_init_tokenizer(init: str | None, tokenizer: Any, entry: Any) -> None:
    """--init RUN whose tokenizer.json maps pieces to other ids than this data's tokenizer is
    an error: RUN's token embeddings would be read for the wrong pieces. (User text datasets
    take --init's tokenizer; catalog datasets have their own.) Compared on the vocabularies
    when both files hold one (``model.vocab``)."""
    if init is None or tokenizer is None or not (Path(init) / TOKENIZER_FILE).is_file():
        return
    try:
        theirs = json.loads((Path(init) / TOKENIZER_FILE).read_text(encoding="utf-8"))
        mine = json.loads(tokenizer_bytes(tokenizer).decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return
    a = theirs.get("model", {}).get("vocab") if isinstance(theirs, dict) else None
    b = mine.get("model", {}).get("vocab") if isinstance(mine, dict) else None
    if isinstance(a, dict | list) and isinstance(b, dict | list) and a != b:
        raise ValueError(
            f"--init {init!r} is invalid for --data {entry.name}: its tokenizer "
            f"({Path(init) / TOKENIZER_FILE}) is not the data's, so its token embeddings "
            "would not mean this data's ids"
        )


def _saved(out: Path) -> dict[str, Any]:
    """OUT/train_args.json when it is a readable JSON object, else {}."""
    try:
        saved = json.loads((out / "train_args.json").read_text())
    except (OSError, ValueError):
        return {}
    return saved if isinstance(saved, dict) else {}


def _strip_nproc(argv: list[str]) -> list[str]:
    out, skip = [], False
    for item in argv:
        if skip:
            skip = False
        elif item == "--nproc":
            skip = True
        elif not item.startswith("--nproc="):
            out.append(item)
    return out


def run(args: argparse.Namespace) -> int:
    import torch

    import tfam
    from tfam.training import Trainer
    from tfam.training.callbacks import CurvesCallback
    from tfam.training.distributed import dist_info, processes_text
    from tfam.training.tasks import task_for
    from tfam.training.wordshare import word_share_callbacks
    from tfam.viz import plot_curves

    if args.nproc is not None:
        if args.nproc < 1:
            raise ValueError(f"--nproc {args.nproc!r} is invalid: expected an int >= 1")
        if args.nproc > 1:
            from tfam.training.distributed import launch

            argv = list(getattr(args, "argv", None) or sys.argv[1:])
            # The device is checked here, before torchrun: a missing GPU is one line, not
            # every worker's traceback.
            return launch(
                args.nproc, _strip_nproc(argv), device=getattr(args, "device", None) or "auto"
            )

    data, asked = _data_spec(args)
    out = Path(args.out) if args.out else Path("runs") / Path(data).name
    files = _file_options(args, out)
    # A resumed run keeps its tokenizer (out/tokenizer.json); --init RUN or a pretrained
    # start lends its own; else one is trained on your text.
    resumed_tok = args.resume and (out / TOKENIZER_FILE).is_file()
    saved_task = _saved(out).get("task") if args.resume else None
    entry = _resolve_data(
        data,
        args.family,
        asked or saved_task,
        files,
        str(out) if resumed_tok else getattr(args, "init", None),
    ).for_family(args.family)
    # An image folder for a model that reads images as tokens (iGPT) becomes pixel sequences,
    # with the palette of the resumed run or of --init RUN when it keeps one.
    from tfam.data.vision.palette import PALETTE_FILE
    from tfam.training.autosize import entry_for_family

    resumed_palette = args.resume and (out / PALETTE_FILE).is_file()
    entry = entry_for_family(
        args.family,
        entry,
        run=str(out) if resumed_palette else getattr(args, "init", None),
        what="--out" if resumed_palette else "--init",
    )
    user_text = entry.is_folder and not _has_images(entry)
    default_out = Path(entry.name).name if entry.is_folder else entry.name
    out = Path(args.out) if args.out else Path("runs") / default_out
    args.out = str(out)
    saved = None
    if args.resume and (out / "train_args.json").is_file():
        try:
            saved = json.loads((out / "train_args.json").read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"{out / 'train_args.json'} is not valid JSON: {err}") from None
        if not isinstance(saved, dict):
            raise ValueError(f"{out / 'train_args.json'} must hold a JSON object")
        for key, given in (("family", args.family), ("data", entry.name)):
            if saved.get(key) not in (None, given):
                raise ValueError(
                    f"cannot resume: {out} holds a {key}={saved[key]!r} run, this command asks "
                    f"for {key}={given!r}"
                )
    task_name = _task_name(asked, entry, saved)
    if saved is not None and (saved.get("task") or entry.task) != task_name:
        theirs = objective(saved.get("task") or entry.task)
        raise ValueError(
            f"cannot resume: {out} holds a --task {theirs} run, this command asks for "
            f"--task {objective(task_name)}"
        )
    # The data for this task (the spoken digits: splits, facts and recipe differ by task).
    labels = args.labels if args.labels is not None else (saved or {}).get("labels")
    data_root = args.data_root or (saved or {}).get("data_root")
    entry = entry.for_task(task_name, root=data_root, labels=labels)
    settings = _settings(args, saved, entry)
    task_name, distill = distillation(settings, task_name, entry)
    if settings["teacher"] is not None and Path(settings["teacher"]).expanduser().is_dir():
        # Recorded whole in train_args.json, so --resume finds it from any directory.
        settings["teacher"] = str(Path(settings["teacher"]).expanduser().resolve())
    _check_family(args.family, task_name)
    # The user's own data with no --preset and no --init: sized from the data (else None).
    from tfam.training.autosize import size_entry

    given = {k: getattr(args, k) for k in ("batch_size", "epochs") if hasattr(args, k)}
    # A resumed --init run was built from its --init's architecture: no sizing then either.
    init_given = _built_from(getattr(args, "init", None), saved)
    entry, sizing = size_entry(
        args.family, task_name, entry, preset=settings["preset"], init=init_given,
        overrides=settings["overrides"], given_train=given,
    )  # fmt: skip
    if sizing is not None and settings["threads"] is None:
        settings["threads"] = sizing.threads
    values, sources = _train_values(args, saved, entry, sizing)
    options = {f.name: field_option(f.name) for f in dataclasses.fields(_train_config_class())}
    try:
        config = _train_config_class()(**values)
    except (ValueError, TypeError) as err:
        raise option_error(err, options, sources) from None
    if "init" in values and values["init"] is not None:
        resolve_model(values["init"], what="--init")  # a clear error before any work
    if settings["threads"] is not None:
        torch.set_num_threads(check_threads(settings["threads"]))

    built_from = _built_from(config.init, saved)
    preset = _preset(settings, args.family, entry, built_from)
    model_values = _model_values(settings, entry, preset, task_name, built_from, sizing)
    torch.manual_seed(config.seed)  # model init; the trainer seeds the rest
    try:
        model = tfam.create_model(preset, **model_values)
    except ValueError as err:
        raise ValueError(f"model config ({preset} with --set): {err}") from None

    teacher = load_teacher(settings["teacher"], entry) if distill is not None else None
    if teacher is not None and not getattr(model.config, "distilled", False):
        raise ValueError(
            f"--teacher is invalid for {preset}: it has no distillation token (distilled="
            f"{getattr(model.config, 'distilled', None)!r}); choose a *_distilled preset or "
            "--set distilled=true"
        )
    augment = _augment(entry, settings)
    load: dict[str, Any] = dict(root=settings["data_root"])
    if entry.seeded:
        # The run's --seed chooses the split (karate's labelled members); a resumed run keeps
        # the one it started with, whatever --seed says now.
        first = ((saved or {}).get("train_config") or {}).get("seed")
        load["seed"] = int(first if first is not None else config.seed)
    train_set = entry.load(entry.train_split, **load)
    whole = len(train_set)
    if settings["train_subset"] is not None:
        from tfam.data.sources.images import train_subset

        # The same examples whatever --seed says: seeds and models compare on one subset.
        train_set = train_subset(
            train_set, settings["train_subset"], what="--train-subset", data=f"--data {entry.name}"
        )
    val_set = entry.load(entry.val_split, **load) if entry.val_split else None
    test_set = entry.load(entry.test_split, **load) if entry.test_split else None
    # The catalog's task for the data, or --task; with --teacher, distillation from it.
    task_options = {"teacher": teacher, **distill} if distill is not None else {}
    try:
        task = task_for(task_name, train_set, **task_options)
    except ValueError as err:
        raise option_error(err, DISTILL_OPTIONS) from None
    tokenizer = getattr(train_set, "tokenizer", None)
    _check_init_tokenizer(config.init, tokenizer, entry)
    if tokenizer is not None and dist_info().is_main:
        save_tokenizer(out, tokenizer)
        classes = getattr(train_set, "classes", None)
        if classes and task_name == entry.task:  # the classes are the default task's
            from tfam.runs import write_labels

            # The class names of a text run's outputs, for predict and eval (an image run
            # keeps its classes in preprocess.json).
            write_labels(out, entry.task, entry.name, list(classes))

    spelled = ["--task" if args.data is None else "--data", data]
    if args.data is not None and asked is not None:
        spelled += ["--task", asked]
    hint = shlex.join(["tfam", "train", args.family, *spelled, "--out", str(out), "--resume"])
    if not config.quiet and dist_info().is_main:  # under torchrun, rank 0 alone speaks
        params = sum(p.numel() for p in model.parameters())
        sizes = f"{_size(train_set, task)} train"
        if settings["train_subset"] is not None:
            sizes += f" (of {whole}: --train-subset {settings['train_subset']:g})"
        sizes += f" / {_size(val_set, task)} val" if val_set is not None else ""
        sizes += f" / {_size(test_set, task)} test" if test_set is not None else ""
        batch = (
            f"batches of <= {config.batch_tokens} tokens"
            if config.batch_tokens
            else f"batch {config.batch_size}"
        )
        # The plan's numbers come after the first steps are timed (tfam.training.budget).
        budget = (
            f" (budget {config.max_minutes:g} min: steps and schedule planned from the first steps)"
            if config.max_minutes
            else ""
        )
        # "1 thread", or under torchrun "2 processes (gloo), 1 thread each".
        compute = processes_text(torch.get_num_threads(), device=config.device)
        epochs = f"{config.epochs} epoch{'s' if config.epochs != 1 else ''}"
        if entry.is_folder:
            print(entry.info.description, flush=True)  # the data, and how its splits were made
        if sizing is not None:
            print(sizing.line, flush=True)
        if getattr(train_set, "note", ""):
            print(train_set.note, flush=True)  # karate: which members are labelled
        if distill is not None:
            n = sum(p.numel() for p in teacher.parameters())
            print(
                f"distilling from {settings['teacher']} ({type(teacher).title}, {n:,} "
                f"parameters): {distill['kind']}, alpha {distill['alpha']:g}"
                + (f", tau {distill['tau']:g}" if distill["kind"] == "soft" else ""),
                flush=True,
            )
        print(
            f"{preset} ({params:,} parameters) on {entry.name}: {sizes} {_items(train_set, task)}, "
            f"{epochs}{budget} of {batch}, lr {config.lr:g} ({config.schedule}), "
            f"{compute} -> {out}",
            flush=True,
        )
        if augment is not None:
            print(f"augmentation: {augment.describe()}", flush=True)
        if config.ema is not None:
            print(
                f"weight average: ema {config.ema:g} (validation, the best epoch, the test "
                "score and the saved model use it)",
                flush=True,
            )
    run_args = {
        "command": "train",
        "family": args.family,
        "data": entry.name,
        # The task when it is not the data's default (train_args.json of other runs unchanged),
        # and always for your own files, with the options that read them (--resume, eval).
        **({"task": task_name} if task_name != entry.task or user_text else {}),
        **settings,
        **(files if user_text else {}),
        "model_config": model.config.to_dict(),
        "title": f"{preset} on {Path(entry.name).name if entry.is_folder else entry.name}",
    }
    try:
        trainer = Trainer(
            model,
            train_set,
            test_set,
            config,
            out_dir=out,
            augment=augment,
            run_args=run_args,
            resume_hint=hint,
            val_set=val_set,
            callbacks=[CurvesCallback(plot_curves), *word_share_callbacks(task, train_set)],
            task=task,
        )
        trainer.fit(resume=args.resume)
    except KeyboardInterrupt:
        return 130  # the trainer saved a checkpoint and printed how to resume
    except ValueError as err:
        # The trainer names its field ("device='cuda' is invalid ..."): say it as the option.
        translated = option_error(err, options, sources)
        if str(translated) == str(err):
            raise
        raise translated from None
    return 0
