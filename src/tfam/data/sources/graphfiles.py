"""The user's own graphs: molecules as a CSV of SMILES and a value or label, or one graph as an
edge list with node features.

**Molecules** (``--data molecules.csv``; a .tsv with tabs): a header row naming a ``smiles``
column (or the one ``--text-column`` names) and the target column (``--label-column``, else
the one other column, else one named value, label, target, y or class). The target decides
the task: numbers that are not all integers, or integers of more than 20 distinct values, are
a value per molecule (graph regression); anything else (words, or a few integers) a class per
molecule (graph classification). Each SMILES becomes a graph of one-hot atoms and typed bonds
(:mod:`tfam.data.graphs.molecules`); one RDKit cannot read is one error naming FILE:LINE.
Splits: ``--val FILE`` / ``--test FILE`` as given, else a seeded 10% of the rows as val.

**One graph** (``--data folder/``): ``nodes.csv`` with a header ``id,<feature>...,label`` (the
id column first or named ``id``; the label column ``label`` or ``--label-column``; an empty
label = an unlabelled node; every other column a number, a node feature; no feature columns =
one-hot identities) and ``edges.csv`` with ``source,target[,type]`` (node ids as in nodes.csv;
each row an undirected edge; ``type``, any text, becomes an edge type). Node classification:
the labelled nodes are split, seeded, into 70% train, 10% val and 20% test; every split sees
the whole graph and is scored on its own nodes.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from tfam.data.graphs.graph import (
    UNLABELLED,
    Graph,
    GraphDataset,
    GraphInfo,
    holdout_indices,
    target_stats,
)

__all__ = ["GraphFiles", "is_graph_data", "load_graph_files"]

TARGET_NAMES = ("value", "label", "target", "y", "class")
MAX_INTEGER_CLASSES = 20
VAL_FRACTION = 0.1


@dataclass
class GraphFiles:
    """The user's graphs read for one task: its name, facts and splits."""

    path: Path
    task: str
    info: GraphInfo
    splits: dict[str, GraphDataset]


def _header(path: Path) -> list[str]:
    try:
        with path.open(encoding="utf-8", newline="") as f:
            line = f.readline()
    except (OSError, UnicodeDecodeError):
        return []
    return [
        c.strip().lower()
        for c in line.rstrip("\r\n").split("\t" if path.suffix.lower() == ".tsv" else ",")
    ]


def is_graph_data(path: str | os.PathLike, text_column: str | None = None) -> bool:
    """Whether ``path`` holds the user's graphs: a folder with nodes.csv and edges.csv, or a
    CSV/TSV whose header names a smiles column (or ``text_column``)."""
    p = Path(path).expanduser()
    if p.is_dir():
        return (p / "nodes.csv").is_file() and (p / "edges.csv").is_file()
    if p.is_file() and p.suffix.lower() in (".csv", ".tsv"):
        want = (text_column or "smiles").lower()
        return want in _header(p)
    return False


def _rows(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """(header, [(line number, cells)]) of a CSV/TSV; one line for an unreadable file."""
    try:
        with path.open(encoding="utf-8", newline="") as f:
            reader = csv.reader(f, delimiter="\t" if path.suffix.lower() == ".tsv" else ",")
            rows = [(reader.line_num, r) for r in reader]
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    rows = [(n, r) for n, r in rows if any(c.strip() for c in r)]
    if not rows:
        raise ValueError(f"{path}: empty; expected a header row and one row per item")
    header = [c.strip() for c in rows[0][1]]
    for n, r in rows[1:]:
        if len(r) != len(header):
            raise ValueError(f"{path}:{n}: {len(r)} cells; the header has {len(header)}")
    return header, [(n, [c.strip() for c in r]) for n, r in rows[1:]]


def _column(
    header: list[str], name: str | None, path: Path, what: str, default: tuple[str, ...]
) -> int:
    lower = [h.lower() for h in header]
    if name is not None:
        if name.lower() not in lower:
            raise ValueError(
                f"{path}: no {what} column {name!r}; the header is {', '.join(header)}"
            )
        return lower.index(name.lower())
    for d in default:
        if d in lower:
            return lower.index(d)
    raise ValueError(
        f"{path}: no {what} column (one named {' or '.join(default)}); the header is "
        f"{', '.join(header)}: name it with --{'label' if what == 'target' else 'text'}-column"
    )


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _decide(values: list[str]) -> tuple[str, tuple[str, ...]]:
    """(task, classes) from a target column: see the module docstring."""
    numbers = [_number(v) for v in values]
    if values and all(x is not None for x in numbers):
        integers = all(float(x).is_integer() for x in numbers)  # type: ignore[arg-type]
        if not integers or len(set(numbers)) > MAX_INTEGER_CLASSES:
            return "graph-regression", ()
        return "graph-classification", tuple(str(int(x)) for x in sorted(set(numbers)))  # type: ignore[arg-type]
    return "graph-classification", tuple(sorted(set(values)))


def _class_name(text: str) -> str:
    x = _number(text)
    return str(int(x)) if x is not None and float(x).is_integer() else text


def _molecules(
    path: Path, text_column: str | None, label_column: str | None
) -> tuple[list[Graph], list[str]]:
    from tfam.data.graphs.molecules import smiles_to_graph

    header, rows = _rows(path)
    s = _column(header, text_column, path, "SMILES", ("smiles",))
    others = [h.lower() for i, h in enumerate(header) if i != s]
    default = tuple(others) if len(others) == 1 else TARGET_NAMES
    t = _column(header, label_column, path, "target", default)
    graphs, targets = [], []
    for n, r in rows:
        if not r[t]:
            raise ValueError(f"{path}:{n}: empty {header[t]!r} for SMILES {r[s]!r}")
        try:
            graphs.append(smiles_to_graph(r[s]))
        except ValueError as err:
            raise ValueError(f"{path}:{n}: {err}") from None
        targets.append(r[t])
    return graphs, targets


def _read_molecules(
    path: Path,
    text_column: str | None,
    label_column: str | None,
    val: str | os.PathLike | None,
    test: str | os.PathLike | None,
    seed: int,
) -> GraphFiles:
    from tfam.data.graphs.molecules import ATOM_FEATURES, BOND_TYPES

    graphs, targets = _molecules(path, text_column, label_column)
    task, classes = _decide(targets)
    parts: dict[str, tuple[list[Graph], list[str]]] = {}
    if val is not None:
        parts["train"] = (graphs, targets)
        parts["val"] = _molecules(Path(val).expanduser(), text_column, label_column)
    else:
        # At least one molecule for validation when there are two or more.
        share = max(VAL_FRACTION, 1 / len(graphs)) if len(graphs) > 1 else 0.0
        kept, held = holdout_indices(len(graphs), share, seed)
        parts["train"] = ([graphs[i] for i in kept], [targets[i] for i in kept])
        if held:
            parts["val"] = ([graphs[i] for i in held], [targets[i] for i in held])
    if test is not None:
        parts["test"] = _molecules(Path(test).expanduser(), text_column, label_column)
    for split, (gs, ts) in parts.items():
        for g, v in zip(gs, ts, strict=True):
            if task == "graph-regression":
                number = _number(v)
                if number is None:
                    raise ValueError(f"{path}: {split} target {v!r} is not a number")
                g.target = number
            else:
                name = _class_name(v)
                if name not in classes:
                    raise ValueError(
                        f"{path}: {split} label {v!r} is not among the training labels "
                        f"({', '.join(classes)})"
                    )
                g.target = classes.index(name)
    train_targets = [float(g.target) for g in parts["train"][0]]  # type: ignore[arg-type]
    facts = {"train_size": len(parts["train"][0]), "test_size": len(parts.get("test", ([], []))[0])}
    if task == "graph-regression":
        facts.update(target_stats(train_targets))
    kind = "a value" if task == "graph-regression" else f"one of {len(classes)} classes"
    info = GraphInfo(
        name=str(path),
        in_features=ATOM_FEATURES,
        edge_types=len(BOND_TYPES),
        classes=classes,
        head="value" if task == "graph-regression" else "graph",
        description=(
            f"molecules {path}: {len(graphs)} SMILES, {kind} each; "
            + (
                "splits as given"
                if val is not None
                else f"val: a seeded {VAL_FRACTION:.0%} holdout"
            )
        ),
        facts=facts,
    )
    splits = {k: GraphDataset(v[0], info, k) for k, v in parts.items()}
    return GraphFiles(path, task, info, splits)


def _read_edge_list(path: Path, label_column: str | None, seed: int) -> GraphFiles:
    header, rows = _rows(path / "nodes.csv")
    lower = [h.lower() for h in header]
    id_col = lower.index("id") if "id" in lower else 0
    lab = _column(header, label_column, path / "nodes.csv", "target", ("label", "class", "y"))
    feature_cols = [i for i in range(len(header)) if i not in (id_col, lab)]
    ids = {r[id_col]: k for k, (_, r) in enumerate(rows)}
    if len(ids) != len(rows):
        raise ValueError(f"{path / 'nodes.csv'}: node ids repeat; each row is one node")
    if feature_cols:
        values = []
        for n, r in rows:
            row = [_number(r[i]) for i in feature_cols]
            if any(x is None for x in row):
                bad = next(r[i] for i, x in zip(feature_cols, row, strict=True) if x is None)
                raise ValueError(f"{path / 'nodes.csv'}:{n}: feature {bad!r} is not a number")
            values.append(row)
        nodes = torch.tensor(values, dtype=torch.float32)
        features = f"{len(feature_cols)} features"
    else:
        nodes = torch.eye(len(rows))
        features = "one-hot identities"
    labels_text = [r[lab] for _, r in rows]
    classes = tuple(sorted({_class_name(v) for v in labels_text if v}))
    if len(classes) < 2:
        raise ValueError(
            f"{path / 'nodes.csv'}: {len(classes)} label(s); node classification needs 2 or more"
        )
    labels = torch.tensor(
        [classes.index(_class_name(v)) if v else UNLABELLED for v in labels_text], dtype=torch.int64
    )
    eh, erows = _rows(path / "edges.csv")
    el = [h.lower() for h in eh]
    src = el.index("source") if "source" in el else 0
    dst = el.index("target") if "target" in el else 1
    typ = el.index("type") if "type" in el else None
    kinds = sorted({r[typ] for _, r in erows}) if typ is not None else ["edge"]
    sources, targets, types = [], [], []
    for n, r in erows:
        for end in (r[src], r[dst]):
            if end not in ids:
                raise ValueError(f"{path / 'edges.csv'}:{n}: node {end!r} is not in nodes.csv")
        a, b = ids[r[src]], ids[r[dst]]
        k = kinds.index(r[typ]) if typ is not None else 0
        sources += [a, b]
        targets += [b, a]
        types += [k, k]
    known = (labels != UNLABELLED).nonzero().flatten().tolist()
    rest, test = holdout_indices(len(known), 0.2, seed)
    fit, val = holdout_indices(len(rest), 0.125, seed)  # 10% of all labelled nodes
    chosen = {
        "train": [known[rest[i]] for i in fit],
        "val": [known[rest[i]] for i in val],
        "test": [known[i] for i in test],
    }
    info = GraphInfo(
        name=str(path),
        in_features=nodes.shape[1],
        edge_types=len(kinds),
        classes=classes,
        head="node",
        description=(
            f"graph {path}: {len(rows)} nodes ({features}), {len(erows)} edges, "
            f"{len(kinds)} edge type(s), {len(known)} labelled nodes in {len(classes)} classes: "
            f"{len(chosen['train'])} train / {len(chosen['val'])} val / {len(chosen['test'])} "
            "test (seeded)"
        ),
        facts={"train_size": 1, "test_size": 1},
        inputs="nodes",
    )
    splits = {}
    for split, members in chosen.items():
        if not members:
            continue
        shown = torch.full_like(labels, UNLABELLED)
        shown[members] = labels[members]
        graph = Graph(
            nodes=nodes,
            edge_index=torch.tensor([sources, targets], dtype=torch.int64).reshape(2, -1),
            edge_types=torch.tensor(types, dtype=torch.int64),
            node_labels=shown,
            name=path.name,
        )
        splits[split] = GraphDataset([graph], info, split)
    return GraphFiles(path, "node-classification", info, splits)


def load_graph_files(
    path: str | os.PathLike,
    *,
    text_column: str | None = None,
    label_column: str | None = None,
    val: str | os.PathLike | None = None,
    test: str | os.PathLike | None = None,
    seed: int = 0,
) -> GraphFiles:
    """The user's graphs at ``path`` (see the module docstring) with their splits."""
    p = Path(path).expanduser()
    if p.is_dir():
        if val is not None or test is not None:
            raise ValueError(
                f"--val/--test are invalid for the graph folder {p}: its splits are drawn from its labelled nodes"
            )
        return _read_edge_list(p, label_column, seed)
    return _read_molecules(p, text_column, label_column, val, test, seed)
