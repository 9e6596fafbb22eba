"""`tfam explain`: the step-by-step shape, parameter and FLOP table of a model."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from tfam.cli.common import (
    add_command,
    add_dataclass_options,
    field_option,
    parse_pair,
    parse_sets,
    parse_value,
    resolve_model,
)

__all__ = ["overrides_from_args", "parse_pair", "parse_value", "register", "run"]

HELP = "step-by-step shapes, parameters and FLOPs of a model"
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
      the toy setting of the source documents: 6 patches, D = 10, 2 heads of width 5
  tfam explain vit_digits --blocks all --set pool=mean --set class_token=false
  tfam explain runs/digits --json > digits_explain.json
  tfam explain gpt_char_small --seq-len 64        a text model's table at 64 tokens
"""

# Explain's own options; config fields of these names (none today) get no flag, only --set.
_OWN_OPTIONS = ("name", "set", "batch_size", "blocks", "json", "seq_len")


def _model_config_classes() -> list[type]:
    """Every registered family's config class (the model registry decides which exist)."""
    from tfam.config import config_class
    from tfam.models import MODEL_CLASSES

    return [config_class(family) for family in sorted(MODEL_CLASSES)]


def register(subparsers: Any) -> None:
    p = add_command(subparsers, "explain", HELP, DESCRIPTION, EPILOG)
    p.add_argument("name", metavar="NAME", help="preset, family or model directory")
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any config field, e.g. --set pool=mean (repeatable)",
    )
    model = p.add_argument_group(
        "model config fields (each family's config dataclass; same as --set FIELD=VALUE)"
    )
    for cls in _model_config_classes():
        add_dataclass_options(
            model,
            cls,
            skip=_OWN_OPTIONS,
            show_defaults=False,
            help_fallback="config field {name}",
        )
    p.add_argument("--batch-size", type=int, default=1, metavar="B", help="default: 1")
    p.add_argument(
        "--seq-len",
        type=int,
        default=None,
        metavar="N",
        help="token-sequence models (gpt, bert, transformer): the table at N tokens, shapes "
        "and FLOPs (default: the context, max_positions)",
    )
    p.add_argument(
        "--blocks",
        choices=("first", "all"),
        default="first",
        help="first: block 1 in full and one row for the others (default); all: every block",
    )
    p.add_argument("--json", action="store_true", help="print the table as JSON")
    p.set_defaults(func=run)


def _family_of(name: str) -> str:
    """The family NAME refers to (the one resolver of presets, families and model dirs)."""
    return resolve_model(name, what="NAME").family


def overrides_from_args(args: argparse.Namespace, family: str) -> dict[str, Any]:
    """Config overrides from the dedicated flags and --set KEY=VALUE, checked against the
    family's config fields."""
    from tfam.config import config_class

    cls = config_class(family)
    valid = {f.name for f in dataclasses.fields(cls)}
    overrides = parse_sets(args.sets, valid, f"the {family!r} config ({cls.__name__})")
    source = {key: f"--set {key}={overrides[key]}" for key in overrides}
    for item in args.sets:  # name the --set as the user wrote it
        key = item.partition("=")[0].strip().replace("-", "_")
        source[key] = f"--set {item}"
    flags = {
        f.name: field_option(f.name)
        for c in _model_config_classes()
        for f in dataclasses.fields(c)
        if f.name not in _OWN_OPTIONS
    }
    for key, flag in flags.items():
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
    try:
        table = explain(
            args.name,
            batch_size=args.batch_size,
            blocks=args.blocks,
            seq_len=args.seq_len,
            **overrides,
        )
    except ValueError as err:
        prefix = f"seq_len={args.seq_len!r} "
        if args.seq_len is not None and str(err).startswith(prefix):
            raise ValueError(f"--seq-len {args.seq_len} {str(err)[len(prefix) :]}") from None
        raise
    print(table.to_json() if args.json else table.to_text())
    return 0
