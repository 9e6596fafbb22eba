"""`tfam eval DIR`: accuracy, per-class accuracy and confusion matrix of a trained model."""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

from tfam.cli.common import add_device_option, device_from, resolve_model

EPILOG = """examples:
  tfam eval runs/digits                        test split of the dataset it was trained on
  tfam eval runs/digits --split train --out runs/digits/confusion_train.png
  tfam eval runs/photos --split val --device cuda       a model trained on an image folder

Prints the accuracy and a per-class table, writes the confusion matrix (rows = true class)
as a PNG (default DIR/confusion.png) and every number into DIR/eval.json.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "eval",
        help="accuracy, per-class table and confusion matrix of a trained model",
        description="Evaluate a trained model (a run directory of `tfam train`) on a dataset split.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "dir", metavar="DIR", help="run directory: config.json, model.safetensors, preprocess.json"
    )
    p.add_argument(
        "--data",
        metavar="NAME",
        default=None,
        help="dataset (default: the one in DIR/preprocess.json)",
    )
    p.add_argument(
        "--split",
        default=None,
        metavar="SPLIT",
        help="split to evaluate: train, fit, val or test (default: test, or val for an image "
        "folder)",
    )
    p.add_argument(
        "--out",
        metavar="PNG",
        default=None,
        help="confusion matrix image (default: DIR/confusion.png)",
    )
    p.add_argument(
        "--root", metavar="DIR", default=None, help="where to look first for dataset files"
    )
    p.add_argument(
        "--batch-size", type=int, default=256, help="images per forward pass (default: 256)"
    )
    add_device_option(p)
    p.set_defaults(func=run)


def _write_json(path: Path, data: dict) -> None:
    # Temp file + rename: a reader never sees half a file.
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def run(args: argparse.Namespace) -> int:
    from tfam.data import resolve_data
    from tfam.data.preprocess import load_preprocess
    from tfam.training.evaluation import evaluate
    from tfam.viz import plot_confusion

    source = resolve_model(args.dir, what="DIR", kinds=("dir",))
    run_dir = Path(args.dir)
    if args.batch_size < 1:
        raise ValueError(f"--batch-size {args.batch_size} is invalid: expected an int >= 1")
    device = device_from(args)
    pre = load_preprocess(run_dir)
    model = source.load(device)
    pre.check_model(model)
    name = args.data or pre.dataset
    if not name:
        raise ValueError("preprocess.json names no dataset: pass --data NAME_OR_DIR")
    entry = resolve_data(name)
    split = args.split or entry.test_split or entry.val_split
    if split not in entry.splits:
        raise ValueError(
            f"--split {split!r} is invalid for {entry.name}: expected one of "
            f"{', '.join(entry.splits)}"
        )
    data = entry.load(split, root=args.root)
    size = data.image_size if isinstance(data.image_size, tuple) else (data.image_size,) * 2
    if data.in_channels != pre.in_channels or len(data.classes) != len(pre.classes):
        raise ValueError(
            f"--data {name}: {data.in_channels}-channel images in {len(data.classes)} classes, but "
            f"the model takes {pre.in_channels}-channel images in {len(pre.classes)} classes"
        )
    if tuple(size) != tuple(pre.image_size):
        raise ValueError(
            f"--data {name}: images are {size[0]}x{size[1]}, the model takes "
            f"{pre.image_size[0]}x{pre.image_size[1]}"
        )
    # Normalise exactly as the model was trained (preprocess.json), not with whatever
    # statistics the dataset object would compute for itself.
    data = data.with_stats(pre.mean, pre.std)
    result = evaluate(model, data, batch_size=args.batch_size, classes=pre.classes, device=device)

    print(f"model {run_dir} on {name} {split}: {result.num_examples} images")
    print(f"accuracy: {100 * result.accuracy:.2f}% ({result.correct}/{result.num_examples})")
    print(f"loss: {result.loss:.4f}")
    print()
    width = max(5, *(len(c) for c in result.classes))
    print(f"{'class':<{width}}  {'count':>6}  {'correct':>7}  {'accuracy':>8}")
    for cls, count, right, acc in zip(
        result.classes,
        result.class_counts.tolist(),
        result.class_correct.tolist(),
        result.per_class_accuracy.tolist(),
    ):
        shown = "-" if math.isnan(acc) else f"{100 * acc:.2f}%"
        print(f"{cls:<{width}}  {count:>6}  {right:>7}  {shown:>8}")
    confused = result.most_confused(3)
    if confused:
        print()
        print(
            "most confused (true -> predicted): "
            + ", ".join(f"{t} -> {p} ({n})" for t, p, n in confused)
        )

    out = Path(args.out) if args.out else run_dir / "confusion.png"
    plot_confusion(
        result.confusion,
        result.classes,
        out,
        title=f"Confusion matrix: {run_dir.name}, {name} {split}",
    )
    numbers = {"model_dir": str(run_dir), "dataset": name, "split": split, **result.to_dict()}
    numbers["confusion_png"] = str(out)
    _write_json(run_dir / "eval.json", numbers)
    print()
    print(f"confusion matrix: {out}")
    print(f"numbers: {run_dir / 'eval.json'}")
    return 0
