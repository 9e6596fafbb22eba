"""Molecules as graphs (RDKit): each atom a one-hot vector, each bond two typed edges.

An atom's features are the concatenation of one-hot blocks (the source documents' "one atom,
one one-hot vector", with the facts RDKit gives beside the element):

- element: one of :data:`ELEMENTS`, or "other" (13);
- degree (heavy-atom neighbours): 0..5, or more (7);
- total hydrogen count (implicit + explicit): 0..3, or more (5);
- aromatic: 1 if in an aromatic ring (1);
- formal charge: -2 or less, -1, 0, +1, +2 or more (5).

F = :data:`ATOM_FEATURES` = 31. Bonds are edges in both directions, typed by
:data:`BOND_TYPES` (single 0, double 1, triple 2, aromatic 3; any other kind, such as dative,
counts as single). Hydrogens are not nodes (they are each heavy atom's count).
"""

from __future__ import annotations

from typing import Any

import torch

from tfam.data.graphs.graph import Graph

__all__ = [
    "ATOM_FEATURES",
    "BOND_TYPES",
    "ELEMENTS",
    "atom_features",
    "feature_names",
    "require_rdkit",
    "smiles_to_graph",
]

ELEMENTS = ("C", "N", "O", "S", "F", "Cl", "Br", "I", "P", "B", "Si", "Se")
DEGREES = 6  # 0..5, then one slot for more
HYDROGENS = 4  # 0..3, then one slot for more
CHARGES = (-2, -1, 0, 1, 2)  # clamped to this range
BOND_TYPES = ("single", "double", "triple", "aromatic")
ATOM_FEATURES = (len(ELEMENTS) + 1) + (DEGREES + 1) + (HYDROGENS + 1) + 1 + len(CHARGES)


def require_rdkit() -> Any:
    """The rdkit module, or one line naming the package and the pip command."""
    try:
        from rdkit import Chem, RDLogger
    except ImportError:
        raise ImportError(
            "molecules need the rdkit package, which is not installed: pip install rdkit"
        ) from None
    RDLogger.DisableLog("rdApp.*")  # a bad SMILES is our one line, not RDKit's stderr
    return Chem


def feature_names() -> list[str]:
    """The name of each of the F atom features, in order (for plots and documentation)."""
    return (
        [f"element={e}" for e in ELEMENTS]
        + ["element=other"]
        + [f"degree={d}" for d in range(DEGREES)]
        + [f"degree>={DEGREES}"]
        + [f"H={h}" for h in range(HYDROGENS)]
        + [f"H>={HYDROGENS}"]
        + ["aromatic"]
        + [f"charge={c:+d}" for c in CHARGES]
    )


def _one_hot(index: int, size: int) -> list[float]:
    row = [0.0] * size
    row[index] = 1.0
    return row


def atom_features(atom: Any) -> list[float]:
    """An RDKit atom -> its F one-hot features (see the module docstring)."""
    symbol = atom.GetSymbol()
    element = ELEMENTS.index(symbol) if symbol in ELEMENTS else len(ELEMENTS)
    degree = min(atom.GetDegree(), DEGREES)
    hydrogens = min(atom.GetTotalNumHs(), HYDROGENS)
    charge = min(max(atom.GetFormalCharge(), CHARGES[0]), CHARGES[-1]) - CHARGES[0]
    return (
        _one_hot(element, len(ELEMENTS) + 1)
        + _one_hot(degree, DEGREES + 1)
        + _one_hot(hydrogens, HYDROGENS + 1)
        + [1.0 if atom.GetIsAromatic() else 0.0]
        + _one_hot(charge, len(CHARGES))
    )


def _bond_type(bond: Any) -> int:
    name = str(bond.GetBondType()).lower()  # SINGLE, DOUBLE, TRIPLE, AROMATIC, DATIVE, ...
    return BOND_TYPES.index(name) if name in BOND_TYPES else 0


def smiles_to_graph(smiles: str, target: float | int | None = None) -> Graph:
    """A SMILES string -> its :class:`Graph` (heavy atoms as nodes, bonds as two directed
    typed edges). An invalid SMILES (or one with no atom) is one ValueError line naming it."""
    chem = require_rdkit()
    text = str(smiles).strip()
    mol = chem.MolFromSmiles(text) if text else None
    if mol is None or mol.GetNumAtoms() == 0:
        raise ValueError(f"SMILES {smiles!r} is invalid: RDKit cannot read it as a molecule")
    nodes = torch.tensor([atom_features(a) for a in mol.GetAtoms()], dtype=torch.float32)
    sources, targets, types = [], [], []
    for bond in mol.GetBonds():
        i, j, kind = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx(), _bond_type(bond)
        sources += [i, j]
        targets += [j, i]
        types += [kind, kind]
    edge_index = torch.tensor([sources, targets], dtype=torch.int64).reshape(2, -1)
    return Graph(
        nodes=nodes,
        edge_index=edge_index,
        edge_types=torch.tensor(types, dtype=torch.int64),
        target=target,
        name=text,
    )
