"""Layering is a test: no import cycle anywhere in src/tfam, and imports point one way.

    config, fileio  <-  layers, data  <-  generation  <-  models  <-  training, interop, viz, explain  <-  cli

(generation sits below models because ``model.generate`` is a method of the model; see
docs/architecture.md.)

Every import counts, module level or inside a function: a lazy import against the direction is
still a dependency against it. The package faces (``tfam/__init__.py``, ``__main__``) sit on top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "tfam"

# What each room may import (besides itself). A room not listed is an error: place it here.
ALLOWED: dict[str, set[str]] = {
    "config": set(),
    "fileio": set(),
    "layers": {"config", "fileio"},
    "data": {"config", "fileio"},
    "generation": {"config", "fileio", "layers"},
    "models": {"config", "fileio", "layers", "generation"},
    "training": {"config", "fileio", "layers", "models", "data", "generation"},
    "interop": {"config", "fileio", "layers", "models", "data"},  # data: the MiniLM's files
    "viz": {"config", "fileio", "layers", "models", "data"},
    "explain": {"config", "fileio", "layers", "models"},
    # Run directories: config, model, tokenizer, labels, task; below the command line.
    "runs": {"config", "fileio", "layers", "data", "models", "generation", "training", "interop"},
    "cli": {
        "config",
        "fileio",
        "layers",
        "data",
        "models",
        "generation",
        "training",
        "interop",
        "viz",
        "explain",
        "runs",
        "__init__",
    },
    "plugins": set(),  # entry points only; the plug-ins it loads import what they need
    "__init__": {"config", "layers", "models", "explain", "fileio", "interop", "plugins"},
    "__main__": {"cli"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """tfam modules that ``name`` imports (resolving relative imports and `from pkg import mod`)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_pkg else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import mod` depends on the module; `from pkg import name` on pkg.
            subs = [f"{base}.{a.name}" for a in node.names]
            targets = [t for t in subs if t in known]
            if len(targets) < len(subs):
                targets.append(base)
        for t in targets:
            if t in known and t != name:
                out.add(t)
    return out


def room(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    return parts[1]


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: imports_of(m, p, set(mods)) for m, p in mods.items()}


def test_every_room_is_placed():
    rooms = {room(m) for m in modules()}
    assert rooms <= set(ALLOWED), f"place these rooms in ALLOWED: {sorted(rooms - set(ALLOWED))}"


def test_imports_point_one_way():
    bad = []
    for module, targets in graph().items():
        src = room(module)
        for target in sorted(targets):
            dst = room(target)
            if dst != src and dst not in ALLOWED[src]:
                bad.append(f"{module} -> {target} ({src} may not import {dst})")
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(g.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(g):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_cycle():
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


@pytest.mark.parametrize(
    "g,expected",
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
    ],
)
def test_the_cycle_finder_finds_cycles(g, expected):
    assert find_cycle(g) == expected


def test_the_import_reader_sees_lazy_and_relative_imports(tmp_path):
    pkg = tmp_path / "tfam" / "layers"
    pkg.mkdir(parents=True)
    f = pkg / "x.py"
    f.write_text("def f():\n    from tfam.models import base\nfrom . import y\n")
    known = {"tfam.models", "tfam.models.base", "tfam.layers.y", "tfam.layers"}
    assert imports_of("tfam.layers.x", f, known) == {"tfam.models.base", "tfam.layers.y"}
