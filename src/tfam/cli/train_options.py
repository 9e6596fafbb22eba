"""`tfam train`'s option groups beyond the training values: augmentation and the training
subset, your own text files, and distillation (--teacher and the DeiT loss, Touvron et al.
2021).

The file options say how to read --data FILE (docs/data.md). A distilled DeiT learns from a
teacher through its distillation token (:mod:`tfam.training.tasks.distillation`); here are the
options that ask for it, the checks that they fit the task, and the teacher's loading (a run,
model directory or preset that reads the data's images and predicts its classes). groups
are saved with the run like every other option.
"""

from __future__ import annotations

import argparse
from typing import Any

from tfam.cli.train_help import objective

# BatchAugment's fields (tfam.data.default_augment's arguments) -> (the run setting, the option).
AUGMENT_OPTIONS = {
    "padding": ("pad", "--pad"),
    "flip": ("flip", "--flip"),
    "erase": ("erase", "--erase"),
    "mixup": ("mixup", "--mixup"),
    "cutmix": ("cutmix", "--cutmix"),
}


def add_augmentation_options(p: argparse.ArgumentParser) -> None:
    """--no-augment, --pad, --flip, --erase, --mixup, --cutmix and --train-subset; saved with
    the run."""
    a = p.add_argument_group(
        "augmentation (defaults per dataset, see below) and the training subset"
    )
    a.add_argument(
        "--no-augment",
        action="store_true",
        default=None,
        help="no augmentation (= --pad 0 --no-flip --erase 0, no mixing)",
    )
    a.add_argument(
        "--pad",
        type=int,
        metavar="PX",
        default=None,
        help="random crop after padding by PX pixels per side, at most half the image side; "
        "0 = no crop (pixel sequences, iGPT: the same on the palette ids, padding with black)",
    )
    a.add_argument(
        "--flip",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="random horizontal flips",
    )
    a.add_argument(
        "--erase",
        type=float,
        metavar="P",
        default=None,
        help="random erasing: with probability P, one rectangle of 2-33%% of the image becomes "
        "noise (DeiT's recipe: 0.25; default 0; images only, not pixel sequences)",
    )
    a.add_argument(
        "--mixup",
        type=float,
        metavar="ALPHA",
        default=None,
        help="Mixup: each batch blends with itself reversed, x = lam x_i + (1 - lam) x_j, lam ~ "
        "Beta(ALPHA, ALPHA), and the loss weighs both labels so (DeiT's recipe: 0.8; default "
        "0 = off; image classification only)",
    )
    a.add_argument(
        "--cutmix",
        type=float,
        metavar="ALPHA",
        default=None,
        help="CutMix: a box of about 1 - lam of the image comes from its partner, lam ~ "
        "Beta(ALPHA, ALPHA) (DeiT's recipe: 1.0; with --mixup, half the batches get each; "
        "default 0 = off)",
    )
    a.add_argument(
        "--train-subset",
        type=float,
        metavar="N|F",
        default=None,
        help="train on part of the training split: a fraction in (0, 1) or a number of "
        "examples, each class in its share, drawn with a fixed seed (the same examples "
        "whatever --seed says, so seeds and models compare on one subset); validation and "
        "test stay whole (--refit adds all of validation). Images and pixel sequences: "
        "learning curves, small-data experiments",
    )


def add_file_options(p: argparse.ArgumentParser) -> None:
    """Options that read your own text files (docs/data.md); saved with the run."""
    f = p.add_argument_group(
        "your own text files (--data FILE: CSV, TSV, JSON Lines, CoNLL-U, .txt or a folder "
        "of them; see docs/data.md)"
    )
    f.add_argument(
        "--text-column",
        metavar="NAME[,NAME2]",
        default=None,
        help="the text column (two, comma-separated, for sentence pairs; for JSON "
        "Lines of token lists, the tokens); default: text, sentence, ... when present",
    )
    f.add_argument(
        "--label-column",
        metavar="NAME",
        default=None,
        help="the label column (default: label, class, ... when present); for "
        "CoNLL-U the tag column: upos (default), xpos, deprel, ...",
    )
    f.add_argument(
        "--val",
        metavar="FILE",
        default=None,
        help="validation file (default: 10%% of --data held out with a fixed seed)",
    )
    f.add_argument(
        "--test",
        metavar="FILE",
        default=None,
        help="test file, reported at the end (default: none)",
    )
    f.add_argument(
        "--source-lang",
        metavar="KEY",
        default=None,
        help="translation: the source column, or language key of "
        '{"translation": {...}} lines (default: the first of two)',
    )
    f.add_argument(
        "--target-lang",
        metavar="KEY",
        default=None,
        help="translation: the target column or language key (with --source-lang)",
    )


# The distillation options, as the command line spells them.
DISTILL_OPTIONS = {
    "distillation": "--distillation",
    "distill_alpha": "--distill-alpha",
    "distill_tau": "--distill-tau",
    "teacher_cache": "--teacher-cache",
}


def add_distillation_options(p: argparse.ArgumentParser) -> None:
    """--teacher and the distillation loss (a distilled DeiT learns from the teacher through
    its distillation token: tfam.training.tasks.distillation); saved with the run."""
    d = p.add_argument_group(
        "distillation (DeiT: the distillation head learns from a teacher, Touvron et al. 2021)"
    )
    d.add_argument(
        "--teacher",
        metavar="RUN_DIR",
        default=None,
        help="a trained image model (a run or model directory, or a preset) with the data's "
        "classes and image shape; MODEL must have a distillation token (tfam train deit)",
    )
    d.add_argument(
        "--distillation",
        choices=("hard", "soft"),
        default=None,
        help="hard: CE of the distillation head against the teacher's argmax (default); soft: "
        "tau^2 KL to the teacher's softmax at temperature tau",
    )
    d.add_argument(
        "--distill-alpha",
        type=float,
        metavar="A",
        default=None,
        help="weight of the teacher's term; the labels' term gets 1 - A (default 0.5)",
    )
    d.add_argument(
        "--distill-tau",
        type=float,
        metavar="T",
        default=None,
        help="soft distillation's temperature (default 1.0)",
    )
    d.add_argument(
        "--teacher-cache",
        action="store_const",
        const=True,
        default=None,
        help="run the teacher once per training image (as stored, before the first step) and "
        "reuse its logits in every epoch, instead of on every augmented view: the teacher's "
        "cost becomes one pass over the data (a resumed run recomputes the cache)",
    )


def distillation(
    settings: dict[str, Any], task_name: str, entry: Any
) -> tuple[str, dict[str, Any] | None]:
    """The run's task and the distillation options (None without --teacher): --teacher turns
    image classification into image-distillation; the loss options need --teacher."""
    given = [DISTILL_OPTIONS[k] for k in DISTILL_OPTIONS if settings[k] is not None]
    if settings["teacher"] is None:
        if given or task_name == "image-distillation":
            what = given[0] if given else "--task distill"
            raise ValueError(f"{what} needs --teacher RUN_DIR: the model to distil from")
        return task_name, None
    if task_name not in ("image-classification", "image-distillation"):
        raise ValueError(
            f"--teacher {settings['teacher']!r} is invalid for --task {objective(task_name)}: "
            "distillation is for image classification"
        )
    kind = settings["distillation"] or "hard"
    alpha = 0.5 if settings["distill_alpha"] is None else settings["distill_alpha"]
    tau = 1.0 if settings["distill_tau"] is None else settings["distill_tau"]
    cache = bool(settings["teacher_cache"])
    mixing = [opt for opt in ("mixup", "cutmix") if settings.get(opt)]
    if cache and mixing and not settings.get("no_augment"):
        raise ValueError(
            f"--teacher-cache is invalid with --{mixing[0]}: the cache holds the teacher's "
            "logits of the stored images, and a mixed image is none of them (drop "
            "--teacher-cache: the teacher then reads every mixed view, as DeiT's does)"
        )
    return "image-distillation", {"kind": kind, "alpha": alpha, "tau": tau, "cache": cache}


def load_teacher(spec: str, entry: Any) -> Any:
    """The teacher of --teacher SPEC (a run or model directory, or a preset) on the CPU, after
    checking that it reads this data's images and predicts its classes (one line otherwise)."""
    import torch

    from tfam.data import task_facts
    from tfam.runs import resolve_model

    source = resolve_model(spec, what="--teacher", kinds=("preset", "dir"))
    cls = source.model_class
    shown = entry.name if not entry.is_folder else entry.info.name
    if cls is None or getattr(cls, "inputs", "") != "image":
        kind = f"a {source.family!r} model" if source.family else "not a tfam model"
        raise ValueError(
            f"--teacher {spec!r} is invalid: it is {kind}; a teacher is an image model (a run "
            f"or model directory of an image family, or a preset) for --data {shown}"
        )
    teacher = source.load("cpu")
    facts = task_facts(entry, "image-classification")
    for key, fact in facts.items():
        theirs = getattr(teacher.config, key, None)
        pair = tuple(fact) if isinstance(fact, (list, tuple)) else (fact, fact)
        if theirs is not None and theirs not in (fact, pair, list(pair)):
            raise ValueError(
                f"--teacher {spec!r} is invalid for --data {shown}: it has {key}={theirs!r}, "
                f"the data needs {key}={fact!r}"
            )
    height, width = facts["image_size"] if isinstance(facts["image_size"], (list, tuple)) else (
        facts["image_size"], facts["image_size"])  # fmt: skip
    with torch.no_grad():
        out = teacher.eval()(torch.zeros(1, facts["in_channels"], height, width))
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (1, facts["num_classes"]):
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(
            f"--teacher {spec!r} is invalid for --data {shown}: it gives {got} for one image, "
            f"the data needs logits of its {facts['num_classes']} classes"
        )
    return teacher
