"""Graph data: molecules featurised by RDKit (benzene, ethanol), the karate club loader, the
users' graph files (a CSV of SMILES, an edge-list folder)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("rdkit", reason="molecules need rdkit (pip install rdkit)")

from tfam.data.graphs.molecules import (  # noqa: E402
    ATOM_FEATURES,
    BOND_TYPES,
    ELEMENTS,
    feature_names,
    smiles_to_graph,
)

AROMATIC = feature_names().index("aromatic")


def _block(graph, prefix: str) -> list[str]:
    """Each node's one-hot value in the feature block named ``prefix`` (e.g. "H=")."""
    names = feature_names()
    cols = [i for i, n in enumerate(names) if n.startswith(prefix)]
    return [names[cols[int(graph.nodes[k, cols].argmax())]] for k in range(graph.num_nodes)]


def test_benzene_is_six_aromatic_carbons_in_a_ring() -> None:
    g = smiles_to_graph("c1ccccc1")
    assert g.nodes.shape == (6, ATOM_FEATURES) and g.num_edges == 12  # 6 bonds, both ways
    assert set(g.edge_types.tolist()) == {BOND_TYPES.index("aromatic")}
    assert g.nodes[:, AROMATIC].tolist() == [1.0] * 6
    assert _block(g, "element") == ["element=C"] * 6
    assert _block(g, "H") == ["H=1"] * 6 and _block(g, "degree") == ["degree=2"] * 6
    # Every atom is exactly one element, one degree, one H count, one charge.
    assert g.nodes.sum(dim=1).tolist() == [5.0] * 6
    # Both directions of every bond.
    pairs = set(map(tuple, g.edge_index.t().tolist()))
    assert all((b, a) in pairs for a, b in pairs)


def test_ethanol_counts_atoms_bonds_and_hydrogens() -> None:
    g = smiles_to_graph("CCO")
    assert g.num_nodes == 3 and g.num_edges == 4
    assert _block(g, "element") == ["element=C", "element=C", "element=O"]
    assert _block(g, "H") == ["H=3", "H=2", "H=1"]
    assert g.nodes[:, AROMATIC].sum() == 0
    assert set(g.edge_types.tolist()) == {BOND_TYPES.index("single")}
    charged = smiles_to_graph("C[N+](=O)[O-]")
    assert _block(charged, "charge") == ["charge=+0", "charge=+1", "charge=+0", "charge=-1"]
    assert len(ELEMENTS) + 1 + 7 + 5 + 1 + 5 == ATOM_FEATURES


@pytest.mark.parametrize("bad", ["C1CC(", "not a molecule", ""])
def test_an_invalid_smiles_is_one_line_naming_it(bad: str) -> None:
    with pytest.raises(ValueError) as err:
        smiles_to_graph(bad)
    assert repr(bad) in str(err.value) and "\n" not in str(err.value)


def test_karate_has_34_members_78_friendships_and_4_labels() -> None:
    pytest.importorskip("networkx", reason="the karate club ships with networkx")
    from tfam.data.sources.karate import KARATE_CLASSES, karate_graph, load_karate

    graph, factions = karate_graph()
    assert graph.num_nodes == 34 and graph.num_edges == 2 * 78
    assert factions[0] == KARATE_CLASSES.index("Mr. Hi")
    assert factions[33] == KARATE_CLASSES.index("Officer")
    assert int((factions == 0).sum()) == 17
    for seed in (0, 1):
        train = load_karate("train", seed=seed)[0].node_labels
        test = load_karate("test", seed=seed)[0].node_labels
        known = (train >= 0).nonzero().flatten().tolist()
        assert len(known) == 4 and {0, 33} <= set(known)
        assert sorted(factions[known].tolist()) == [0, 0, 1, 1]  # one more of each faction
        assert int((test >= 0).sum()) == 30 and not ((train >= 0) & (test >= 0)).any()
        assert torch.equal(train[known], factions[known])
    others = {
        tuple((load_karate("train", seed=s)[0].node_labels >= 0).nonzero().flatten().tolist())
        for s in range(6)
    }
    assert len(others) > 1, "the seed chooses the two other members"


def test_a_csv_of_smiles_decides_regression_or_classification(tmp_path: Path) -> None:
    from tfam.data import resolve_data

    values = tmp_path / "values.csv"
    values.write_text("smiles,logp\nCCO,-0.31\nc1ccccc1,2.13\nCC(=O)O,-0.17\nCCN,-0.13\n")
    entry = resolve_data(values)
    assert entry.task == "graph-regression" and entry.info.head == "value"
    train = entry.load("train")
    assert len(train) + len(entry.load("val")) == 4
    assert abs(entry.info.target_shift - sum(g.target for g in train) / len(train)) < 1e-9
    labels = tmp_path / "labels.csv"
    labels.write_text("SMILES,class\nCCO,1\nc1ccccc1,0\nCC(=O)O,1\nCCN,0\n")
    entry = resolve_data(labels)
    assert entry.task == "graph-classification" and entry.info.classes == ("0", "1")
    bad = tmp_path / "bad.csv"
    bad.write_text("smiles,y\nCCO,1.5\nC1CC(,2.5\n")
    with pytest.raises(ValueError, match=r"bad.csv:3: SMILES 'C1CC\(' is invalid"):
        resolve_data(bad)


def test_an_edge_list_folder_is_node_classification(tmp_path: Path) -> None:
    from tfam.data import resolve_data

    folder = tmp_path / "g"
    folder.mkdir()
    rows = "\n".join(f"n{i},{i % 3},{'ab'[i % 2] if i < 8 else ''}" for i in range(10))
    (folder / "nodes.csv").write_text("id,x,label\n" + rows + "\n")
    edges = "\n".join(f"n{i},n{(i + 1) % 10},{'st'[i % 2]}" for i in range(10))
    (folder / "edges.csv").write_text("source,target,type\n" + edges + "\n")
    entry = resolve_data(folder)
    assert entry.task == "node-classification" and entry.info.classes == ("a", "b")
    assert entry.info.in_features == 1 and entry.info.edge_types == 2
    seen = [entry.load(s)[0].node_labels for s in entry.splits]
    assert sum(int((s >= 0).sum()) for s in seen) == 8  # each labelled node in one split
    assert seen[0].shape == (10,) and entry.load("train")[0].num_edges == 20
