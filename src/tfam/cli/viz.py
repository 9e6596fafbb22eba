"""`tfam viz attention|pos|curves`: pictures of a trained model (PNG, matplotlib Agg)."""

from __future__ import annotations

import argparse
from pathlib import Path

from tfam.cli.common import add_device_option, device_from, resolve_model
from tfam.cli.predict import add_image_options, image_options

EPILOG = """examples:
  tfam viz attention runs/digits test:0 --out attention.png    a test image of the run's dataset
  tfam viz attention runs/digits my_digit.png --layer 1 --out first_block.png
  tfam viz pos runs/digits --out position.png
  tfam viz curves runs/digits --out curves.png
"""

ATTENTION_EPILOG = """examples:
  tfam viz attention runs/digits test:0 --out attention.png
  tfam viz attention runs/digits my_digit.png --layer 1 --out first_block.png
  tfam viz attention runs/digits test:0 --device cuda

Panels: the input, then where the [CLS] token looks in block --layer, one map per head, then the
attention rollout through all blocks (Abnar & Zuidema 2020: average the heads, add the
identity for the residual path, renormalise rows, multiply through the blocks; the [CLS] row
over the patches). Models without a [CLS] token (pool='mean') show the mean attention each
patch receives instead. Heat maps are upsampled to the image size and laid over it.
"""

POS_EPILOG = """example:
  tfam viz pos runs/digits --out position.png

For each patch position (i, j), a small map of the cosine similarity of its position
embedding to those of all patches (ViT paper, figure 7): the learned table, or the fixed
2-D sine-cosine one for models with position='sincos2d'.
"""

CURVES_EPILOG = """example:
  tfam viz curves runs/digits --out curves.png

Loss and accuracy per epoch (train and test) and the learning rate, from DIR/metrics.csv.
"""


def _dir_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR", help="run directory written by `tfam train`")


def register(subparsers: argparse._SubParsersAction) -> None:
    viz = subparsers.add_parser(
        "viz",
        help="attention maps, position-embedding similarity, training curves (PNG)",
        description="Draw pictures of a trained model as PNG files.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    viz.set_defaults(func=lambda args: _usage(viz))
    sub = viz.add_subparsers(title="pictures", metavar="WHAT")
    raw = argparse.RawDescriptionHelpFormatter

    p = sub.add_parser(
        "attention",
        help="per-head [CLS] attention and attention rollout over an image",
        description="Per-head attention of the [CLS] token and attention rollout over an image.",
        epilog=ATTENTION_EPILOG,
        formatter_class=raw,
    )
    _dir_arg(p)
    p.add_argument(
        "image",
        metavar="IMAGE",
        help="image file, or SPLIT:INDEX (e.g. test:0) for a sample of the run's dataset",
    )
    p.add_argument("--out", metavar="PNG", default=None, help="default: DIR/attention.png")
    p.add_argument(
        "--layer",
        type=int,
        default=-1,
        help="block whose heads to show: 1..depth, or negative from the end (default: -1, last)",
    )
    p.add_argument(
        "--discard-ratio",
        type=float,
        default=0.0,
        help="rollout: drop this fraction of the smallest weights per row (default: 0)",
    )
    p.add_argument("--root", metavar="DIR", default=None, help="where to look for dataset files")
    add_image_options(p)
    add_device_option(p)
    p.set_defaults(func=run_attention)

    p = sub.add_parser(
        "pos",
        help="cosine similarity of position embeddings (ViT paper, figure 7)",
        description="Cosine similarity of the position embeddings, patch by patch.",
        epilog=POS_EPILOG,
        formatter_class=raw,
    )
    _dir_arg(p)
    p.add_argument("--out", metavar="PNG", default=None, help="default: DIR/position.png")
    add_device_option(p)
    p.set_defaults(func=run_pos)

    p = sub.add_parser(
        "curves",
        help="loss and accuracy curves from DIR/metrics.csv",
        description="Loss, accuracy and learning rate per epoch from DIR/metrics.csv.",
        epilog=CURVES_EPILOG,
        formatter_class=raw,
    )
    _dir_arg(p)
    p.add_argument("--out", metavar="PNG", default=None, help="default: DIR/curves.png")
    p.set_defaults(func=run_curves)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _run_dir(args: argparse.Namespace) -> Path:
    run_dir = Path(args.dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {str(run_dir)!r} not found")
    return run_dir


def _model(args: argparse.Namespace):  # noqa: ANN202  (a tfam model)
    """The run's model on --device (the one resolver of model directories)."""
    return resolve_model(args.dir, what="DIR", kinds=("dir",)).load(device_from(args))


def _layer_index(layer: int, depth: int) -> int:
    """CLI blocks count from 1 (negative from the end) -> 0-based index."""
    if layer == 0 or not -depth <= layer <= depth:
        raise ValueError(
            f"--layer {layer} is invalid: the model has {depth} blocks; expected 1..{depth} "
            f"or -{depth}..-1 (from the end)"
        )
    return layer - 1 if layer > 0 else layer


def run_attention(args: argparse.Namespace) -> int:
    import tfam
    from tfam.data.preprocess import load_input, load_preprocess
    from tfam.viz import plot_attention

    run_dir = _run_dir(args)
    pre = load_preprocess(run_dir)
    item = load_input(args.image, pre, root=args.root, **image_options(args))
    model = tfam.from_pretrained(run_dir)
    pre.check_model(model)
    layer = _layer_index(args.layer, model.config.depth)
    out = Path(args.out) if args.out else run_dir / "attention.png"
    plot_attention(
        model,
        item.tensor.to(next(model.parameters()).device),
        out,
        pixels=item.pixels,
        layer=layer,
        discard_ratio=args.discard_ratio,
        classes=pre.classes,
        label=item.label,
    )
    print(f"attention of {item.name}: {out}")
    return 0


def run_pos(args: argparse.Namespace) -> int:
    from tfam.viz import plot_position_similarity

    run_dir = _run_dir(args)
    model = _model(args)
    out = Path(args.out) if args.out else run_dir / "position.png"
    plot_position_similarity(model, out)
    print(f"position embedding similarity: {out}")
    return 0


def run_curves(args: argparse.Namespace) -> int:
    from tfam.viz import plot_curves

    run_dir = _run_dir(args)
    out = Path(args.out) if args.out else run_dir / "curves.png"
    plot_curves(run_dir / "metrics.csv", out)
    print(f"training curves: {out}")
    return 0
