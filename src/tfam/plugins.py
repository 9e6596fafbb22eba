"""Plug-ins: packages outside tfam that add kernels, positions, families, tasks or converters.

A plug-in names itself in the Python entry-point group ``tfam.plugins`` (as pytest finds its
plugins), in its pyproject.toml::

    [project.entry-points."tfam.plugins"]
    mine = "my_package.tfam_plugin"            # a module: importing it registers its classes
    other = "my_package.setup:register"        # or a function, called with no arguments

``import tfam`` (and so the ``tfam`` command) loads every plug-in once, after tfam's own
registries are filled, so a plug-in may import anything of tfam. Its classes register
themselves the way tfam's own do (an ``AttentionKernel`` subclass with a ``name``, a config
with ``family = ...`` and its ``TfamModel``, ``register_preset``, ``register_family`` for
explain, ``register_converter``). A plug-in that fails to load is reported as one warning
line on stderr and left out; tfam goes on without it.
"""

from __future__ import annotations

import importlib.metadata
import sys
from typing import Any

GROUP = "tfam.plugins"

# name -> what the entry point loaded (a module, or a function's return value); name -> the
# one-line reason a plug-in was left out.
LOADED: dict[str, Any] = {}
FAILED: dict[str, str] = {}
_done = False


def load_plugins(*, again: bool = False) -> dict[str, Any]:
    """Load every ``tfam.plugins`` entry point not loaded yet (once per process unless
    ``again``); -> the loaded plug-ins by name."""
    global _done
    if _done and not again:
        return LOADED
    _done = True
    try:
        points = importlib.metadata.entry_points(group=GROUP)
    except Exception as err:  # noqa: BLE001 - a broken installation must not stop tfam
        _warn("(entry points)", err)
        return LOADED
    for point in sorted(points, key=lambda p: p.name):
        if point.name in LOADED:
            continue
        try:
            obj = point.load()
            if point.attr and callable(obj):
                obj = obj()
        except Exception as err:  # noqa: BLE001 - any failure of a plug-in: one line, go on
            FAILED[point.name] = f"{type(err).__name__}: {err}"
            _warn(f"{point.name!r} ({point.value})", err)
            continue
        FAILED.pop(point.name, None)
        LOADED[point.name] = obj
    return LOADED


def _warn(what: str, err: BaseException) -> None:
    detail = " ".join(str(err).split()) or type(err).__name__
    print(
        f"tfam: warning: plug-in {what} failed to load and is left out: "
        f"{type(err).__name__}: {detail}",
        file=sys.stderr,
    )


__all__ = ["FAILED", "GROUP", "LOADED", "load_plugins"]
