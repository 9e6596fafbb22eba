"""`tfam train --help`: its examples and the table of every data set's recipe (from the
catalog, the one source of recipes)."""

from __future__ import annotations

import json
from typing import Any

from tfam.cli.common import field_option

__all__ = ["DATASET_DEFAULTS", "EPILOG_HEAD", "EPILOG_TAIL", "objective", "recipes_text"]


def objective(task: str) -> str:
    """The short name of a task (a TASKS name) for --task: its class's ``objective``."""
    from tfam.training.tasks import TASKS

    cls = TASKS.get(task)
    return (cls.objective or cls.name) if cls is not None else task


def _recipes() -> dict[str, dict[str, Any]]:
    """Per dataset: its recipe as option values (preset, TrainConfig fields, threads)."""
    from tfam.data import get_dataset, list_datasets

    table = {}
    for name in list_datasets():
        recipe = get_dataset(name).recipe
        values: dict[str, Any] = {"preset": recipe.preset, **recipe.train}
        if recipe.threads is not None:
            values["threads"] = recipe.threads
        table[name] = values
    return table


# Derived from the catalog for readers of this module; the catalog is the source.
DATASET_DEFAULTS = _recipes()


def _option_text(name: str, value: Any) -> str:
    option = field_option(name)
    if isinstance(value, bool):
        return option if value else f"--no-{option[2:]}"
    if isinstance(value, float):
        return f"{option} {value:g}"
    return f"{option} {value}"


def recipes_text() -> str:
    from tfam.data import get_dataset, list_datasets

    lines = []
    for name in list_datasets():
        entry = get_dataset(name)
        tasks = ", ".join(objective(t) for t in entry.tasks)
        recipes = [(f"--task {tasks}", entry.recipe)]
        recipes += [(f"tfam train {family}", r) for family, r in entry.family_recipes.items()]
        for label, recipe in recipes:
            opts = [_option_text("preset", recipe.preset)] if recipe.preset else []
            opts += [f"--set {k}={json.dumps(v)}" for k, v in recipe.model.items()]
            opts += [_option_text(k, v) for k, v in recipe.train.items()]
            pad, flip = entry.augment
            opts += [f"--pad {pad}", "--flip" if flip else "--no-flip"]
            if recipe.threads is not None:
                opts.append(f"--threads {recipe.threads}")
            lines.append(f"  {name} ({label}):")
            line = "   "
            for opt in opts:
                if len(line) + len(opt) > 92:
                    lines.append(line)
                    line = "   "
                line += " " + opt
            lines.append(line)
    return "\n".join(lines)


EPILOG_HEAD = """examples:
  tfam train vit --data digits                                  ~99% test accuracy in minutes
  tfam train vit --data digits --out runs/d2 --set dim=32 --set depth=2 --epochs 20
  tfam train vit --data fashion-mnist --out runs/fmnist         ~91.6% in about 35 min on 2 cores
  tfam train vit --data fashion-mnist --max-steps 20 --out /tmp/smoke   quick smoke run
  tfam train cnn --data fashion-mnist --train-subset 0.1        10% of the training images
      (each class its share, the same images for every --seed): small-data runs
  tfam train deit --data fashion-mnist --teacher runs/cnn --erase 0.25 --mixup 0.8 --cutmix 1
      DeiT's recipe: a CNN teacher reads every erased, mixed view; its argmax is the
      distillation head's label, while the class head learns both mixed labels
  tfam train igpt --data digits-pixels --ema 0.999               keep an average of the weights
      (Polyak; timm's --model-ema): it is validated, tested and saved in their place
  tfam train vit --data photos/ --out runs/photos               your images: one sub-folder per
      class (or timm's train/ val/ test/), any size; the model is sized from them (header says)
  tfam train vit --data photos/ --init runs/digits              fine-tune: runs/digits' model,
      positions resampled to the new size, a fresh head for other classes (one line says so)
  tfam train bert --data reviews.csv --init minilm_l6           your text: CSV/TSV/JSON Lines
  tfam train gpt --data story.txt                               a GPT on your text (docs/data.md)
  tfam train transformer --data pairs.tsv                       source<TAB>target pairs
  tfam train bert --data sentiment --max-minutes 4              a budget plans the schedule
  tfam train transformer --data reverse                         a seq2seq task learned in minutes
  tfam train vit --data digits --device cuda --precision bf16 --nproc 2    DDP on 2 GPUs
  tfam train vit --data digits --out runs/digits --resume       continue a stopped run exactly
  tfam train vit --data digits --out runs/digits --resume --epochs 400   extend a finished run
  tfam train bert --task sentiment --init minilm_l6             fine-tune the packaged MiniLM
  tfam train bert --task pos --init minilm_l6 --out runs/pos    a tagger: one tag per word
  tfam train gpt --data kjv --max-minutes 5                     a character-level GPT on the KJV
  tfam train graph --data karate --seed 3                       the club from 4 labelled members:
      0, 33 and one more of each faction, drawn by --seed (printed at the start, kept in
      graph.json; --seed 0 labels 0, 16, 32, 33); scored on the other 30
      (--task NAME without --data, where NAME is a data set, is --data NAME; a text run also
      gets tokenizer.json and, for classes, labels.json, which tfam predict, eval, generate
      and embed read)

defaults per dataset (any option given on the command line wins):
"""

EPILOG_TAIL = """
--data is a dataset name, an image folder (one sub-folder per class, PNG/JPEG, any size:
resized to the first image's size; or timm's train/ val/ test/ folders, used as given) or your
text files (docs/data.md). Training uses the dataset's "fit" split; the "val" split (a fixed,
seeded, class-stratified holdout of train, or the files given) chooses the best epoch, whose
weights are saved; the test split, where the dataset has one, scores the saved model.

The run directory OUT gets config.json + model.safetensors (the best validation epoch's model,
loadable with tfam.from_pretrained), preprocess.json, metrics.csv (one row per epoch), curves.png,
train_args.json and checkpoints/ (last.pt, prev.pt). Checkpoints are written at every epoch
end and every --save-every optimiser steps; a run that is killed or stopped with Ctrl-C
continues from there with --resume, bit for bit as if it had never stopped. With --resume,
options not given on the command line are taken from OUT/train_args.json.

--batch-size is the number of images per optimiser step; --accum-steps K splits it into K
micro-batches (same result, less memory). The learning rate warms up linearly for
--warmup-epochs, then follows a cosine down to --min-lr at the last step.
"""
