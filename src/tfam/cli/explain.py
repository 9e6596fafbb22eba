"""`tfam explain`: the step-by-step shape, parameter and FLOP table of a model."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

DESCRIPTION = """\
Step-by-step table of a model, in the order of the ViT description: patching, linear
projection, + [CLS], + position, then per block LN, MHSA (Q/K/V, scores, softmax, weighted
sum, concat heads, W_O), residual, LN, MLP, residual; then final LN, pooling and head.
Each step shows its input and output shape (in numbers and in symbols), its parameters
(exact, adding up to the model's count) and its FLOPs (a multiply-add = 2 FLOPs).
NAME is a preset (see `tfam list`), a family (`vit`) or a model directory
(config.json + model.safetensors). The model is built on the meta device: no memory, instant."""

EPILOG = """\
examples:
  tfam explain vit_base_patch16_224
  tfam explain vit --image-size 8x12 --patch-size 4 --in-channels 1 --dim 10 --heads 2 --depth 1 --num-classes 3
      the seed's toy setting: 6 patches, D = 10, 2 heads of width 5
  tfam explain vit_digits --blocks all --set pool=mean --set class_token=false
  tfam explain runs/digits --json > digits_explain.json
"""

_PAIR_HELP = "HEIGHTxWIDTH or one int, e.g. 8x12 or 224"


def parse_pair(text: str) -> int | tuple[int, int]:
    """'224' -> 224, '8x12' -> (8, 12) (height x width)."""
    m = re.fullmatch(r"\s*(\d+)\s*(?:[xX,]\s*(\d+)\s*)?", text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: expected {_PAIR_HELP}")
    return int(m[1]) if m[2] is None else (int(m[1]), int(m[2]))


def parse_value(text: str) -> Any:
    """A --set value: true/false, none, ints, floats, 8x12 pairs, JSON lists, else a string."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    if re.fullmatch(r"\d+\s*[xX]\s*\d+", text.strip()):
        return parse_pair(text)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "explain",
        help="step-by-step shapes, parameters and FLOPs of a model",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", metavar="NAME", help="preset, family or model directory")
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any config field, e.g. --set pool=mean (repeatable)",
    )
    p.add_argument(
        "--image-size", type=parse_pair, metavar="HxW", help="image size, e.g. 224 or 8x12"
    )
    p.add_argument(
        "--patch-size", type=parse_pair, metavar="PxQ", help="patch size, e.g. 16 or 4x2"
    )
    p.add_argument("--in-channels", type=int, metavar="C", help="image channels C")
    p.add_argument("--dim", type=int, metavar="D", help="model width D")
    p.add_argument("--heads", type=int, metavar="H", help="attention heads H")
    p.add_argument("--depth", type=int, metavar="N", help="number of encoder blocks")
    p.add_argument("--ffn-dim", type=int, metavar="F", help="MLP hidden width (default 4*D)")
    p.add_argument("--num-classes", type=int, metavar="K", help="classes of the head (0: none)")
    p.add_argument("--batch-size", type=int, default=1, metavar="B", help="default: 1")
    p.add_argument(
        "--blocks",
        choices=("first", "all"),
        default="first",
        help="first: block 1 in full and one row for the others (default); all: every block",
    )
    p.add_argument("--json", action="store_true", help="print the table as JSON")
    p.set_defaults(func=run)


# The dedicated flags, each setting one config field.
_FLAG_FIELDS = {
    "image_size": "--image-size",
    "patch_size": "--patch-size",
    "in_channels": "--in-channels",
    "dim": "--dim",
    "heads": "--heads",
    "depth": "--depth",
    "ffn_dim": "--ffn-dim",
    "num_classes": "--num-classes",
}


def _family_of(name: str) -> str:
    """The family NAME refers to; ValueError naming NAME and the valid choices otherwise."""
    from tfam.models import MODEL_CLASSES, PRESETS
    from tfam.models.base import CONFIG_NAME

    if name in PRESETS:
        return PRESETS[name].family
    if name in MODEL_CLASSES:
        return name
    path = Path(name)
    if path.is_dir():
        config = path / CONFIG_NAME
        if not config.is_file():
            raise FileNotFoundError(
                f"NAME={name!r} is a directory without {CONFIG_NAME}: a model directory holds "
                f"{CONFIG_NAME} and model.safetensors (written by save_pretrained or `tfam train`)"
            )
        return str(json.loads(config.read_text()).get("family", ""))
    raise ValueError(
        f"NAME={name!r} is not a preset, a family or a model directory; "
        f"presets: {', '.join(sorted(PRESETS))}; families: {', '.join(sorted(MODEL_CLASSES))}"
    )


def overrides_from_args(args: argparse.Namespace, family: str) -> dict[str, Any]:
    """Config overrides from the dedicated flags and --set KEY=VALUE, checked against the
    family's config fields."""
    from tfam.config import config_class

    valid = {f.name for f in dataclasses.fields(config_class(family))}
    overrides: dict[str, Any] = {}
    source: dict[str, str] = {}
    for item in args.sets:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ValueError(f"--set {item!r} is invalid: expected KEY=VALUE, e.g. --set pool=mean")
        if key not in valid:
            raise ValueError(
                f"--set {item!r} is invalid: {key!r} is not a field of the {family!r} config; "
                f"valid fields: {', '.join(sorted(valid))}"
            )
        overrides[key] = parse_value(value)
        source[key] = f"--set {item}"
    for key, flag in _FLAG_FIELDS.items():
        value = getattr(args, key, None)
        if value is None:
            continue
        if key not in valid:
            raise ValueError(f"{flag} does not apply to the {family!r} family")
        if key in overrides and overrides[key] != value:
            raise ValueError(f"{flag} {value!r} conflicts with {source[key]}; give {key} once")
        overrides[key] = value
    return overrides


def run(args: argparse.Namespace) -> int:
    from tfam.explain import explain

    if args.batch_size < 1:
        raise ValueError(f"--batch-size {args.batch_size} is invalid: expected a positive int")
    family = _family_of(args.name)
    overrides = overrides_from_args(args, family)
    table = explain(args.name, batch_size=args.batch_size, blocks=args.blocks, **overrides)
    print(table.to_json() if args.json else table.to_text())
    return 0
