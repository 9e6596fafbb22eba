"""The NCI polar surface areas that ship inside the rdkit wheel
(``rdkit/Data/NCI/first_5k.tpsa.csv``): the first 5,000 molecules of the NCI database as
SMILES, each with its topological polar surface area in Å² "calculated using Daylight tools
and Ertl's contrib program tpsa.c" (the file's header line), a measure of how polar, hence
hydrophilic, a molecule is.

Graph regression: atoms as one-hot vectors and bonds as typed edges
(:mod:`tfam.data.graphs.molecules`), one value per molecule. Splits: a fifth held out as
``test`` (a fixed seed, so a run's --seed never changes it); ``val`` 10% of the rest (seeded
by the loader's ``seed``, 0 by default); ``fit`` the remainder; ``train`` = fit + val. The
model is trained on targets normalised by the fit split's mean and standard deviation and
reports them in Å².
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

from tfam.data.graphs.graph import (
    Graph,
    GraphDataset,
    GraphInfo,
    holdout_indices,
    target_stats,
)
from tfam.data.graphs.molecules import ATOM_FEATURES, BOND_TYPES, smiles_to_graph

__all__ = ["NCI_SPLITS", "nci_tpsa_file", "nci_tpsa_info", "load_nci_tpsa", "read_nci_tpsa"]

NCI_SPLITS = ("train", "fit", "val", "test")
TEST_FRACTION = 0.2
VAL_FRACTION = 0.1
TEST_SEED = 0


def nci_tpsa_file() -> Path:
    """The CSV inside the installed rdkit package; one line naming pip when rdkit is absent."""
    spec = importlib.util.find_spec("rdkit")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "nci-tpsa needs the rdkit package, which is not installed: pip install rdkit"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "Data" / "NCI" / "first_5k.tpsa.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: the rdkit wheel ships it; reinstall rdkit")
    return path


@functools.cache
def read_nci_tpsa() -> tuple[tuple[str, float], ...]:
    """(SMILES, TPSA) rows of the file, in file order (the '#' header line skipped)."""
    path = nci_tpsa_file()
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        smiles, _, value = line.rpartition(",")
        try:
            rows.append((smiles.strip(), float(value)))
        except ValueError:
            raise ValueError(f"{path}:{number}: {value!r} is not a number") from None
    return tuple(rows)


@functools.cache
def _parsed() -> tuple[tuple[Graph, ...], int]:
    """(the molecules RDKit reads, as graphs with their TPSA; how many rows it cannot read)."""
    graphs, bad = [], 0
    for smiles, value in read_nci_tpsa():
        try:
            graphs.append(smiles_to_graph(smiles, target=value))
        except ValueError:
            bad += 1  # e.g. pentavalent nitro nitrogens written as [N+](=O)(=O): RDKit refuses
    return tuple(graphs), bad


def _indices(split: str, seed: int) -> list[int]:
    n = len(_parsed()[0])
    train, test = holdout_indices(n, TEST_FRACTION, TEST_SEED)
    if split == "test":
        return test
    if split == "train":
        return train
    kept, held = holdout_indices(len(train), VAL_FRACTION, seed)
    return [train[i] for i in (kept if split == "fit" else held)]


def _facts() -> dict[str, float]:
    graphs = _parsed()[0]
    return {
        **target_stats([float(graphs[i].target) for i in _indices("fit", 0)]),  # type: ignore[arg-type]
        "train_size": len(_indices("train", 0)),
        "test_size": len(_indices("test", 0)),
    }


@functools.cache
def nci_tpsa_info() -> GraphInfo:
    """The data set's facts (loads the CSV's numbers on first use, no molecule)."""
    return GraphInfo(
        name="nci-tpsa",
        in_features=ATOM_FEATURES,
        edge_types=len(BOND_TYPES),
        classes=(),
        head="value",
        description=(
            "NCI molecules' topological polar surface area (Å², Ertl's tpsa.c), from "
            "rdkit/Data/NCI/first_5k.tpsa.csv: atoms as one-hot vectors, bonds as typed edges; "
            "the molecules RDKit reads (a few of the 4,999 rows it refuses are left out); a "
            "seeded fifth held out as test, 10% of the rest as val"
        ),
        facts=_facts,
        unit="Å²",
    )


def load_nci_tpsa(split: str = "train", *, seed: int = 0) -> GraphDataset:
    """The molecules of ``split`` (train, fit, val, test) as graphs with their TPSA."""
    if split not in NCI_SPLITS:
        raise ValueError(f"split={split!r} is invalid: expected one of {', '.join(NCI_SPLITS)}")
    graphs = _parsed()[0]
    return GraphDataset([graphs[i] for i in _indices(split, seed)], nci_tpsa_info(), split)
