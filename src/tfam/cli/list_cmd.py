"""`tfam list`: the registered presets with their sizes (module named list_cmd: `list` is a
builtin)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tfam.cli.common import add_command

HELP = "registered presets with their sizes"
DESCRIPTION = """\
The registered presets: family, exact parameter count (computed on the meta device, so no
weights are allocated), image size, patch size, number of patches N, width D, depth, heads,
and a description. PATTERN is a shell-style pattern (vit_*_224); a pattern without wildcards
matches names that contain it."""

EPILOG = """\
examples:
  tfam list
  tfam list 'vit_base*'
  tfam list digits
  tfam list --json
"""


def register(subparsers: Any) -> None:
    p = add_command(subparsers, "list", HELP, DESCRIPTION, EPILOG)
    p.add_argument("pattern", nargs="?", default="*", metavar="PATTERN", help="default: all")
    p.add_argument("--json", action="store_true", help="print the presets as JSON")
    p.set_defaults(func=run)


def _pair(value: Any) -> list[int] | None:
    return list(value) if isinstance(value, tuple | list) else None


def preset_info(name: str) -> dict[str, Any]:
    """One preset as plain data: family, exact parameters, sizes, description."""
    from tfam.models import PRESETS, count_parameters, create_config

    preset = PRESETS[name]
    config = create_config(name)
    return {
        "name": name,
        "family": preset.family,
        "params": count_parameters(name),
        "image_size": _pair(getattr(config, "image_size", None)),
        "patch_size": _pair(getattr(config, "patch_size", None)),
        "num_patches": getattr(config, "num_patches", None),
        "dim": config.dim,
        "depth": config.depth,
        "heads": config.heads,
        "description": preset.description,
    }


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return " x ".join(map(str, value))
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def format_table(infos: list[dict[str, Any]]) -> str:
    columns = [
        ("name", "name"),
        ("family", "family"),
        ("params", "parameters"),
        ("image_size", "image"),
        ("patch_size", "patch"),
        ("num_patches", "N"),
        ("dim", "D"),
        ("depth", "depth"),
        ("heads", "heads"),
        ("description", "description"),
    ]
    right = {"params", "num_patches", "dim", "depth", "heads"}
    rows = [[_cell(info[key]) for key, _ in columns] for info in infos]
    head = [title for _, title in columns]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(columns))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if key in right else c.ljust(w)
            for (key, _), c, w in zip(columns, cells, widths)
        ).rstrip()

    return "\n".join([line(head), "  ".join("-" * w for w in widths), *map(line, rows)])


def run(args: argparse.Namespace) -> int:
    from tfam.models import MODEL_CLASSES, PRESETS, list_models

    pattern = args.pattern
    glob = pattern if any(ch in pattern for ch in "*?[") else f"*{pattern}*"
    names = list_models(glob)
    if not names:
        raise ValueError(
            f"PATTERN={pattern!r} matches no preset; presets: {', '.join(sorted(PRESETS))}"
        )
    infos = [preset_info(n) for n in names]
    if args.json:
        print(json.dumps(infos, indent=2))
        return 0
    print(format_table(infos))
    print(
        f"\nfamilies (any config through overrides): {', '.join(sorted(MODEL_CLASSES))}; "
        "details of one model: tfam explain NAME"
    )
    return 0
