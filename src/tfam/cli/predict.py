"""`tfam predict DIR IMAGE...`: the top-k classes of each image, with probabilities (for a
seq2seq run: the translation of each sentence, as `tfam translate`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from tfam.cli.common import add_device_option, device_from, resolve_model
from tfam.cli.translate import run_is_seq2seq

EPILOG = """examples:
  tfam predict runs/digits my_digit.png                 top 5 classes with probabilities
  tfam predict runs/digits a.png b.jpg --top-k 3
  tfam predict runs/digits test:0 test:1                samples of the run's dataset
  tfam predict runs/photos val:0 cat.jpg --device cuda  a model trained on an image folder
  tfam predict runs/kjv-rv "And God saw the light."     a seq2seq run: its translation

Images are converted as the model needs (grayscale/RGB, resized, scaled as in training).
For digits-like data (one channel, light on dark), an image with a bright border (ink on
paper) is inverted and its contrast stretched; --invert yes|no and --no-stretch override.
"""

INVERT_CHOICES = {"auto": "auto", "yes": True, "no": False}


def add_image_options(p: argparse.ArgumentParser) -> None:
    """--invert and --no-stretch, shared with `tfam viz attention`."""
    p.add_argument(
        "--invert",
        choices=tuple(INVERT_CHOICES),
        default="auto",
        help="invert intensities: auto (digits-like data, bright border), yes or no (default: auto)",
    )
    p.add_argument(
        "--no-stretch",
        action="store_true",
        help="do not stretch the contrast of digits-like images to the full range",
    )


def image_options(args: argparse.Namespace) -> dict:
    return {"invert": INVERT_CHOICES[args.invert], "stretch": False if args.no_stretch else None}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "predict",
        help="top-k classes for image files (seq2seq runs: translations)",
        description="Classify image files (PNG, JPEG, ... via Pillow) with a trained model.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "dir", metavar="DIR", help="run directory: config.json, model.safetensors, preprocess.json"
    )
    p.add_argument(
        "images",
        metavar="IMAGE",
        nargs="+",
        help="image file, or SPLIT:INDEX (e.g. test:0) for a sample of the run's dataset; for a "
        "seq2seq run, a sentence",
    )
    p.add_argument(
        "--top-k", type=int, default=5, help="classes to list per image (default: 5; images only)"
    )
    add_image_options(p)
    add_device_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from tfam.data.preprocess import load_input, load_preprocess

    if args.top_k < 1:
        raise ValueError(f"--top-k {args.top_k} is invalid: expected an int >= 1")
    source = resolve_model(args.dir, what="DIR", kinds=("dir",))
    if run_is_seq2seq(source):
        return _translate(args)
    device = device_from(args)
    pre = load_preprocess(Path(args.dir))
    # Read every image before any output: a bad file fails the command up front.
    inputs = [load_input(spec, pre, **image_options(args)) for spec in args.images]
    model = source.load(device)
    pre.check_model(model)
    with torch.inference_mode():
        x = torch.stack([i.tensor for i in inputs]).to(device)
        probs = model(x).float().softmax(dim=-1).cpu()
    k = min(args.top_k, probs.shape[-1])
    values, indices = probs.topk(k, dim=-1)  # sorted, largest first
    width = max(len(c) for c in pre.classes)
    for n, (item, vals, idx) in enumerate(zip(inputs, values.tolist(), indices.tolist())):
        notes = []
        if item.inverted:
            notes.append("inverted: bright background")
        if item.stretched:
            notes.append("contrast stretched")
        if item.label is not None:
            notes.append(f"true class {pre.classes[item.label]}")
        print(item.name + (f"  ({', '.join(notes)})" if notes else ""))
        for rank, (p, c) in enumerate(zip(vals, idx), start=1):
            print(f"  {rank}. {pre.classes[c]:<{width}}  {p:.4f}")
        if n + 1 < len(inputs):
            print()
    return 0


def _translate(args: argparse.Namespace) -> int:
    """A seq2seq run: each argument translated with translate's default decoding."""
    from tfam.cli import translate

    parser = argparse.ArgumentParser(add_help=False)
    translate.add_decoding_options(parser)
    defaults = parser.parse_args([])
    for name, value in vars(defaults).items():
        setattr(args, name, value)
    args.texts = list(args.images)
    return translate.run(args)
