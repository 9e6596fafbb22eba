"""Warm starts (``TrainConfig.init``, ``tfam train --init``): copy trained weights into a
fresh model, tensor by tensor, where names match, as timm's ``--initial-checkpoint`` with a new
``num_classes`` and Hugging Face's ``ignore_mismatched_sizes`` do.

A tensor of the same name and shape is copied. A learned position table of another size is
resampled to this model's: a 2-D patch grid bicubically (the family's ``adapt_state_dict``, for
ViT :func:`tfam.layers.resample_pos_embed`), a 1-D table of another ``max_positions`` by
:func:`resample_positions_1d`. Every other tensor of another shape (a head for another number of
classes) and every tensor the source lacks (another head kind) keeps its fresh values: it is
reset. One line says what was copied, resampled and reset."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["load_init_weights", "resample_positions_1d"]


def resample_positions_1d(table: Tensor, length: int) -> Tensor:
    """A learned 1-D position table (L, D) for another number of positions: (length, D).

    Fewer positions keep the first ``length`` rows (those positions keep what they learned);
    more are resampled linearly along the positions (``align_corners=False``, in at least
    float32), as the 2-D tables are bicubically."""
    old, dim = table.shape
    if length <= old:
        return table[:length].clone()
    work = torch.promote_types(table.dtype, torch.float32)
    grid = table.to(work).t().unsqueeze(0)  # (1, D, L)
    grid = F.interpolate(grid, size=length, mode="linear", align_corners=False)
    return grid.squeeze(0).t().contiguous().to(table.dtype).reshape(length, dim)


# Heads that score tokens, not classes: their config's num_labels (iGPT keeps one for its
# classifier head) says nothing about them.
_TOKEN_HEAD_TASKS = ("causal-lm", "masked-lm")


def _classes(model: nn.Module) -> Any:
    """The classes ``model``'s head scores (None for a head over tokens). Vision families
    count num_classes, text families num_labels."""
    config = getattr(model, "config", None)
    head_task = getattr(type(model), "head_task", None)
    if callable(head_task) and config is not None and head_task(config) in _TOKEN_HEAD_TASKS:
        return None
    n = getattr(config, "num_classes", None)
    return n if n is not None else getattr(config, "num_labels", None)


def _modules(names: Iterable[str]) -> str:
    """'head' for head.weight, head.bias; 'encoder.blocks.1' for every tensor of that block;
    at most three such names, then a count."""
    groups: list[str] = []
    for name in names:
        parts = name.split(".")
        numbered = [i for i, p in enumerate(parts[:-1]) if p.isdigit()]
        module = ".".join(parts[: numbered[0] + 1] if numbered else parts[:-1] or parts)
        if module not in groups:
            groups.append(module)
    shown = ", ".join(groups[:3])
    return shown + (f" and {len(groups) - 3} more" if len(groups) > 3 else "")


def _trained_on(run: Path) -> str:
    """The dataset a run directory was trained on (its train_args.json; "" when unknown).
    Read here, not through tfam.runs, which sits above training."""
    try:
        args = json.loads((run / "train_args.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    return str(args.get("data") or "") if isinstance(args, dict) else ""


def _source(init: str) -> tuple[nn.Module, Path | None]:
    from tfam.models import create_model, from_pretrained, has_pretrained, list_models

    path = Path(init)
    if path.is_dir():
        try:
            return from_pretrained(path), path
        except (FileNotFoundError, ValueError, OSError) as err:
            raise ValueError(f"init={init!r} is invalid: {err}") from None
    if has_pretrained(init):
        from tfam.models import load_pretrained

        try:
            return load_pretrained(init), None
        except FileNotFoundError as err:
            raise FileNotFoundError(f"init={init!r}: {err}") from None
    if init in list_models():
        return create_model(init), None
    raise ValueError(
        f"init={init!r} is invalid: expected a run directory holding config.json and "
        "model.safetensors, or a model preset name (tfam list)"
    )


def load_init_weights(model: nn.Module, init: str, data: str | None = None) -> list[str]:
    """Copy into ``model`` every tensor of ``init`` whose name matches (see the module doc:
    same shape copied, learned positions resampled, the rest reset). ``init`` is a run
    directory, or a preset name: the preset's pretrained weights when it has some
    (``tfam.models.has_pretrained``, such as the packaged MiniLM of ``minilm_l6``), else its
    random initial weights. ``data``: the dataset this model trains on, to say when a head of
    the same shape was trained on other data.

    Returns the one line to log, e.g. ``init: runs/shapes -> 42 tensors copied, pos_embed
    resampled 5x5 -> 8x8, head reset (3 -> 10 classes)``."""
    from tfam.models import has_pretrained

    source, path = _source(init)
    theirs_config = getattr(source, "config", None)
    mine_config = getattr(model, "config", None)
    theirs = source.state_dict()
    same_family = getattr(theirs_config, "family", None) == getattr(mine_config, "family", None)
    adapt = getattr(model, "adapt_state_dict", None)
    if same_family and callable(adapt):
        theirs = adapt(theirs, theirs_config)  # the family's own resampling (ViT: 2-D grid)
    raw = source.state_dict()
    mine = model.state_dict()
    copied: list[str] = []
    resampled: list[str] = []
    reset: list[str] = []
    unknown: list[str] = []
    old_len = getattr(theirs_config, "max_positions", None)
    new_len = getattr(mine_config, "max_positions", None)
    with torch.no_grad():
        for name, tensor in mine.items():
            if name not in theirs:
                unknown.append(name)
                continue
            value = theirs[name]
            if (
                value.shape != tensor.shape
                and value.ndim == 2
                and old_len is not None
                and new_len is not None
                and value.shape == (old_len, tensor.shape[1])
                and tensor.shape[0] == new_len
            ):
                value = resample_positions_1d(value, new_len)
            if value.shape != tensor.shape:
                reset.append(name)
                continue
            tensor.copy_(value)
            (resampled if raw[name].shape != tensor.shape else copied).append(name)
    if not copied and not resampled:
        raise ValueError(
            f"init={init!r} is invalid: none of its tensors fits this model (no name with the "
            "same shape)"
        )
    where = init if path is not None or not has_pretrained(init) else f"{init} (pretrained)"
    parts = [f"init: {where} -> {len(copied)} tensor{'s' if len(copied) != 1 else ''} copied"]
    for name in resampled:
        a, b = tuple(raw[name].shape), tuple(mine[name].shape)
        grids = [getattr(c, "grid_size", None) for c in (theirs_config, mine_config)]
        if len(a) == 3 and all(g is not None for g in grids):
            (gh, gw), (nh, nw) = grids
            parts.append(f"{name} resampled {gh}x{gw} -> {nh}x{nw}")
        else:
            verb = "cut" if b[0] < a[0] else "resampled"
            parts.append(f"{name} {verb} {a[0]} -> {b[0]} positions")
    a, b = _classes(source), _classes(model)
    if reset:
        # A head for other classes, apart from tensors of another shape for another reason
        # (another width, or a Swin window: its relative bias table).
        other = a is not None and b is not None and a != b
        heads = [
            n for n in reset if other and mine[n].shape[0] == b and theirs[n].shape[:1] == (a,)
        ]
        if heads:
            parts.append(f"{_modules(heads)} reset ({a} -> {b} classes)")
        rest = [n for n in reset if n not in heads]
        if rest:
            parts.append(f"{_modules(rest)} reset (shape)")
    if unknown:
        line = f"{_modules(unknown)} new"
        head_a = getattr(theirs_config, "head", None)
        head_b = getattr(mine_config, "head", None)
        if isinstance(head_a, str) and isinstance(head_b, str) and head_a != head_b:
            line += f" (head {head_a!r} -> {head_b!r})"
        else:
            line += f" (not in {init})"
        parts.append(line)
    if not reset and not unknown and data is not None and path is not None:
        trained_on = _trained_on(path)
        if trained_on and trained_on != data and a is not None:
            a_name, b_name = Path(trained_on).name, Path(data).name  # folders: their names
            parts.append(f"head copied ({a} classes of {a_name}, until trained on {b_name})")
    return [", ".join(parts)]
