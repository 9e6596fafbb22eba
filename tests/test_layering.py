"""Layering is a test: no import cycle anywhere in src/tfam, and imports point one way.

    config, fileio  <-  layers, data  <-  generation  <-  models  <-  training, interop, viz, explain  <-  cli
                        layers  <-  bench  <-  cli   (the complexity lab: kernels only)
    models, training, bench, viz, explain  <-  studies  <-  cli   (tfam study)

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
    # The complexity lab (tfam bench): attention kernels and their cost(), beside explain; the
    # long-sequence lab (bench/long_sequences.py) also trains models on data sets.
    "bench": {"config", "fileio", "layers", "models", "data"},
    # The studies (tfam study): experiments that call models, training, the bench, viz and
    # explain (its FLOPs: the vision study).
    "studies": {
        "config",
        "fileio",
        "layers",
        "data",
        "models",
        "generation",
        "training",
        "bench",
        "viz",
        "explain",
    },
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
        "bench",
        "runs",
        "studies",
        "__init__",
    },
    "plugins": set(),  # entry points only; the plug-ins it loads import what they need
    # data: the face tells from_files the families' tasks (set_family_tasks).
    "__init__": {"config", "layers", "models", "explain", "fileio", "interop", "plugins", "data"},
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
    """tfam modules that ``name`` imports: the modules each import line names, resolving
    relative imports.

    ``import a.b.c`` and ``from a.b.c import x`` name ``a.b.c``; ``from a.b import c`` names
    the package ``a.b`` (its ``__init__`` runs and ``c`` is read from it) and, when ``c`` is a
    module, ``a.b.c`` too. Python initialises a module's parent packages before it whoever
    imports it; that implicit step is no edge (otherwise every package face that re-exports
    its modules would be a cycle), but a module that names its own package face, whose
    ``__init__`` imports the module back, is one (``data.charlm`` did: ``from tfam.data
    import sword``, while ``tfam.data`` imports the catalog, which imports charlm).
    """
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
            targets = [base, *(f"{base}.{a.name}" for a in node.names)]
        out.update(t for t in targets if t in known and t != name)
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


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Every group of modules that import each other (strongly connected components of more
    than one module, or a module importing itself), each sorted, the groups sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(g.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = stack[stack.index(node) :]
            del stack[stack.index(node) :]
            if len(group) > 1 or node in g.get(node, ()):
                found.append(sorted(group))

    for node in sorted(g):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_import_cycle():
    g = graph()
    groups = cycles(g)
    shown = [" -> ".join(find_cycle({m: g[m] & set(group) for m in group}) or group)
             for group in groups]  # fmt: skip
    assert not groups, "import cycles between modules:\n" + "\n".join(shown)


def test_the_cycle_check_reads_modules_not_packages():
    """Every room's modules form no cycle, within a room as well as across rooms."""
    g = graph()
    rooms = {room(m) for m in g}
    assert len(g) > len(rooms)  # the graph's nodes are modules, several per room
    assert "tfam.data.catalog" in g and "tfam.data.sources.charlm" in g["tfam.data.catalog"]


@pytest.mark.parametrize(
    "g,expected",
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
    ],
)
def test_the_cycle_finder_finds_cycles(g, expected):
    assert find_cycle(g) == expected
    assert cycles(g) == ([sorted(expected[:-1])] if expected else [])


def test_cycles_lists_every_group():
    g = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"f"}, "g": {"a"}}
    assert cycles(g) == [["a", "b"], ["c", "d", "e"], ["f"]]


def test_a_module_naming_its_own_package_face_is_a_cycle(tmp_path):
    """The catalog/charlm shape: the package face imports a module that imports from the face;
    a plain submodule import (parents initialised implicitly) is no edge to the face."""
    pkg = tmp_path / "tfam" / "data"
    pkg.mkdir(parents=True)
    files = {
        "__init__.py": "from tfam.data.catalog import load\n",
        "catalog.py": "from tfam.data.charlm import read\n",
        "charlm.py": "from tfam.data import sword\n",
        "sword.py": "",
        "text.py": "import tfam.data.sword as sword\nfrom tfam.data.sword import x\n",
    }
    for file, text in files.items():
        (pkg / file).write_text(text)
    known = {"tfam.data", *(f"tfam.data.{f[:-3]}" for f in files if f != "__init__.py")}
    g = {m: imports_of(m, pkg / f"{m.rsplit('.', 1)[-1] if m != 'tfam.data' else '__init__'}.py",
                       known) for m in known}  # fmt: skip
    assert g["tfam.data.charlm"] == {"tfam.data", "tfam.data.sword"}
    assert g["tfam.data.text"] == {"tfam.data.sword"}
    assert cycles(g) == [["tfam.data", "tfam.data.catalog", "tfam.data.charlm"]]


def test_the_import_reader_sees_lazy_and_relative_imports(tmp_path):
    pkg = tmp_path / "tfam" / "layers"
    pkg.mkdir(parents=True)
    f = pkg / "x.py"
    f.write_text("def f():\n    from tfam.models import base\nfrom . import y\n")
    known = {"tfam.models", "tfam.models.base", "tfam.layers.y", "tfam.layers"}
    # `from . import y` names the package face tfam.layers too (its __init__ runs).
    assert imports_of("tfam.layers.x", f, known) == {
        "tfam.models",
        "tfam.models.base",
        "tfam.layers.y",
        "tfam.layers",
    }
