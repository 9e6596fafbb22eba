"""Choose the digits recipe by k-fold cross-validation on the train split (the test split unseen).

The digits' validation holdout is 142 images: the recipes worth comparing all score 98-100% on
it, so it cannot rank them. Cross-validation scores each recipe on all 1,437 train images
instead: fold k trains on the other folds (stratified, seeded) and predicts fold k; the table
gives the accuracy over the 1,437 out-of-fold predictions and the errors per fold.

    python benchmarks/digits_cv.py                                   # the catalog recipe
    python benchmarks/digits_cv.py --variant recipe= \
        --variant previous=pool=mean,position=sincos2d,depth=4,epochs=150
    python benchmarks/digits_cv.py --folds 5 --jobs 2 --log cv.jsonl
    python benchmarks/digits_cv.py --family swin --variant recipe= \
        --variant sincos=init_std=0.1,position=sincos2d      # another family's digits recipe

A variant is NAME=FIELD=VALUE[,FIELD=VALUE...] on top of the catalog recipe: fields of the model
config (``dim``, ``depth``, ``pool``, ``position``...) or of TrainConfig (``epochs``,
``weight_decay``...), ``pad`` for the augmentation's shift, and two prototypes that live in this
script only: ``ema=DECAY`` (score an exponential moving average of the weights) and
``rotate=DEGREES`` (random rotations after the shift). Every fold trains single-threaded,
``--jobs`` folds at a time, each in its own process, with the recipe's seed, so folds and
variants differ only by their data and their settings.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import statistics
import tempfile
import time
from typing import Any

import torch
import torch.nn.functional as F

import tfam
from tfam.cli.common import parse_set
from tfam.data import BatchAugment, default_augment, get_dataset, load_dataset
from tfam.data.sources.images import ImageDataset
from tfam.models import create_config
from tfam.training import TrainConfig, Trainer


def folds_of(labels: torch.Tensor, k: int, seed: int) -> list[torch.Tensor]:
    """k disjoint, class-stratified index sets covering every example once."""
    g = torch.Generator().manual_seed(seed)
    parts: list[list[int]] = [[] for _ in range(k)]
    for c in torch.unique(labels).tolist():
        idx = (labels == c).nonzero().squeeze(1)
        idx = idx[torch.randperm(idx.numel(), generator=g)].tolist()
        for i, j in enumerate(idx):
            parts[i % k].append(j)
    return [torch.tensor(sorted(p)) for p in parts]


class RotatingAugment(BatchAugment):
    """Experimental: the catalog's shift, then a random rotation in [-degrees, degrees]
    (bilinear, black outside), drawn from the trainer's augmentation generator."""

    def __init__(self, base: BatchAugment, degrees: float) -> None:
        super().__init__(base.padding, base.flip, base.fill)
        self.degrees = degrees

    @property
    def is_identity(self) -> bool:
        return False

    def __call__(self, images, generator=None, fill=None):  # noqa: ANN001, ANN204
        out = super().__call__(images, generator, fill) if not super().is_identity else images
        b = out.shape[0]
        angle = (torch.rand(b, generator=generator) * 2 - 1) * self.degrees * torch.pi / 180
        cos, sin = angle.cos(), angle.sin()
        zero = torch.zeros_like(cos)
        theta = torch.stack([cos, -sin, zero, sin, cos, zero], 1).view(b, 2, 3)
        grid = F.affine_grid(theta, list(out.shape), align_corners=False)
        black = torch.as_tensor(self.fill if fill is None else fill).reshape(-1)[0]
        return F.grid_sample(out - black, grid, align_corners=False) + black


class EmaTrainer(Trainer):
    """Experimental: keeps an exponential moving average of the weights (decay warmed up as
    min(decay, (1 + n) / (10 + n))) and scores it on the test set at the end."""

    ema_decay = 0.999

    def step(self, batch):  # noqa: ANN001, ANN201
        values = super().step(batch)
        if not hasattr(self, "ema"):
            import copy

            self.ema, self.ema_n = copy.deepcopy(self.model).eval(), 0
        self.ema_n += 1
        d = min(self.ema_decay, (1 + self.ema_n) / (10 + self.ema_n))
        with torch.no_grad():
            for e, p in zip(self.ema.parameters(), self.model.parameters()):
                e.lerp_(p, 1 - d)
        return values


def parse_variant(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME=FIELD=VALUE,...`` -> (NAME, {FIELD: value}); each FIELD=VALUE is read by tfam's
    one ``--set`` parser."""
    name, _, rest = text.partition("=")
    if not name:
        raise SystemExit(f"--variant {text!r} is invalid: expected NAME=FIELD=VALUE[,...]")
    try:
        return name, dict(parse_set(item) for item in filter(None, rest.split(",")))
    except ValueError as err:
        raise SystemExit(f"--variant {text!r}: {err}") from None


def run_fold(job: tuple[str, str, dict[str, Any], int, int, int]) -> dict[str, Any]:
    family, name, overrides, fold, k, split_seed = job
    torch.set_num_threads(1)
    entry = get_dataset("digits").for_family(family)
    train = load_dataset("digits", "train")
    parts = folds_of(train.labels, k, split_seed)
    held = parts[fold]
    keep = torch.cat([p for i, p in enumerate(parts) if i != fold]).sort().values

    def subset(idx: torch.Tensor, split: str) -> ImageDataset:
        return ImageDataset(
            train.images[idx],
            train.labels[idx],
            train.classes,
            mean=train.mean,
            std=train.std,
            pixel_scale=train.pixel_scale,
            name="digits",
            split=split,
        )

    fit_set, val_set = subset(keep, "fit"), subset(held, "val")
    train_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    settings = dict(entry.recipe.train)
    model_values: dict[str, Any] = {}
    pad, ema, rotate = None, None, None
    for key, value in overrides.items():
        if key == "pad":
            pad = int(value)
        elif key == "ema":
            ema = float(value)
        elif key == "rotate":
            rotate = float(value)
        elif key in train_fields:
            settings[key] = value
        else:
            model_values[key] = value
    config = TrainConfig(**settings, quiet=True, progress=False)
    torch.manual_seed(config.seed)
    model = tfam.create_model(entry.recipe.preset, **model_values)
    start = time.perf_counter()
    augment = default_augment(entry, padding=pad)
    if rotate:
        augment = RotatingAugment(augment, rotate)
    cls = Trainer
    if ema:
        cls = type("Ema", (EmaTrainer,), {"ema_decay": ema})
    with tempfile.TemporaryDirectory() as out:
        trainer = cls(model, fit_set, val_set, config, out_dir=out, augment=augment)
        result = trainer.fit()
    acc = float(result.final_test_acc)
    if ema:
        x, y = val_set.get_batch(torch.arange(len(val_set)))
        with torch.no_grad():
            acc = float((trainer.ema(x).argmax(1) == y).float().mean())
    return {
        "variant": name,
        "overrides": overrides,
        "fold": fold,
        "n": len(val_set),
        "errors": round((1 - acc) * len(val_set)),
        "accuracy": acc,
        "seconds": time.perf_counter() - start,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--variant", action="append", default=None, help="NAME=FIELD=VALUE,...")
    parser.add_argument(
        "--family", default="vit", help="whose digits recipe the variants start from (vit)"
    )
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=2, help="folds trained at a time")
    parser.add_argument("--split-seed", type=int, default=0, help="seed of the fold split")
    parser.add_argument("--log", default=None, help="append each fold's result (JSON lines)")
    args = parser.parse_args()
    variants = [parse_variant(v) for v in (args.variant or ["recipe="])]
    recipe = get_dataset("digits").for_family(args.family).recipe
    if create_config(recipe.preset).family != args.family:
        raise SystemExit(f"--family {args.family!r}: digits has no recipe for that family")
    jobs = [
        (args.family, n, o, f, args.folds, args.split_seed)
        for n, o in variants
        for f in range(args.folds)
    ]
    results: list[dict[str, Any]] = []
    ctx = mp.get_context("spawn")
    with ctx.Pool(args.jobs) as pool:
        for r in pool.imap_unordered(run_fold, jobs):
            results.append(r)
            print(
                f"{r['variant']:<16} fold {r['fold']}: {r['errors']:>2} errors of {r['n']} "
                f"({100 * r['accuracy']:.2f}%), {r['seconds']:.0f} s",
                flush=True,
            )
            if args.log:
                with open(args.log, "a") as f:
                    f.write(json.dumps(r) + "\n")
    print(
        f"\n{args.folds}-fold cross-validation on the digits train split (test split unseen), "
        f"{args.family}'s recipe ({recipe.preset})"
    )
    print(f"{'variant':<16} {'settings':<36} {'CV accuracy':>11}  errors per fold   s/fold")
    for name, overrides in variants:
        rows = sorted((r for r in results if r["variant"] == name), key=lambda r: r["fold"])
        errors = sum(r["errors"] for r in rows)
        n = sum(r["n"] for r in rows)
        setting = ",".join(f"{k}={v}" for k, v in overrides.items()) or "(recipe)"
        per_fold = " ".join(str(r["errors"]) for r in rows)
        secs = statistics.mean(r["seconds"] for r in rows)
        print(
            f"{name:<16} {setting:<36} {100 * (1 - errors / n):>10.2f}%  "
            f"{per_fold:<16} {secs:>6.0f}"
        )


if __name__ == "__main__":
    main()
