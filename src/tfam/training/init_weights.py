"""Warm starts (``TrainConfig.init``, ``tfam train --init``): copy trained weights into a
fresh model, tensor by tensor, where names and shapes match."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = ["load_init_weights"]


def load_init_weights(model: nn.Module, init: str) -> list[str]:
    """Copy into ``model`` every tensor of ``init`` whose name and shape match; the others keep
    their fresh values. ``init`` is a run directory, or a preset name: the preset's pretrained
    weights when it has some (``tfam.models.has_pretrained``, such as the packaged MiniLM of
    ``minilm_l6``), else its random initial weights. Returns the lines to log (which weights
    were copied, and which tensors, such as a head for another class count or a head the
    source lacks, start fresh)."""
    from tfam.models import (
        create_model,
        from_pretrained,
        has_pretrained,
        list_models,
        load_pretrained,
    )

    path = Path(init)
    if path.is_dir():
        try:
            source = from_pretrained(path)
        except (FileNotFoundError, ValueError, OSError) as err:
            raise ValueError(f"init={init!r} is invalid: {err}") from None
        where = str(path)
    elif has_pretrained(init):
        try:
            source = load_pretrained(init)
        except FileNotFoundError as err:
            raise FileNotFoundError(f"init={init!r}: {err}") from None
        where = f"the pretrained weights of {init}"
    elif init in list_models():
        source = create_model(init)
        where = f"preset {init} (its initial weights: no trained weights ship with it)"
    else:
        raise ValueError(
            f"init={init!r} is invalid: expected a run directory holding config.json and "
            "model.safetensors, or a model preset name (tfam list)"
        )
    theirs, mine = source.state_dict(), model.state_dict()
    copied, fresh, unknown = [], [], []
    with torch.no_grad():
        for name, tensor in mine.items():
            if name not in theirs:
                unknown.append(name)
            elif theirs[name].shape != tensor.shape:
                fresh.append(name)
            else:
                tensor.copy_(theirs[name])
                copied.append(name)
    if not copied:
        raise ValueError(
            f"init={init!r} is invalid: none of its tensors fits this model (no name with the "
            "same shape)"
        )
    lines = [f"init: copied {len(copied)}/{len(mine)} tensors from {where}"]
    theirs_config = getattr(source, "config", None)
    mine_config = getattr(model, "config", None)

    def classes(config: Any) -> Any:
        # Vision families count num_classes, text families num_labels.
        n = getattr(config, "num_classes", None)
        return n if n is not None else getattr(config, "num_labels", None)

    a, b = classes(theirs_config), classes(mine_config)
    if fresh:
        what = (
            f"{init} was trained for {a} classes, this model has {b}: "
            if a is not None and b is not None and a != b
            else "shapes differ: "
        )
        lines.append(f"init: {what}a fresh head ({', '.join(fresh)}) is trained from scratch")
    if unknown:
        line = f"init: not in {init}, trained from scratch: {', '.join(unknown)}"
        head_a = getattr(theirs_config, "head", None)
        head_b = getattr(mine_config, "head", None)
        if isinstance(head_a, str) and isinstance(head_b, str) and head_a != head_b:
            line += f" ({init} has head={head_a!r}, this model a fresh {head_b!r} head)"
        lines.append(line)
    return lines
