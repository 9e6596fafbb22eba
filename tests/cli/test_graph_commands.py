"""The graph commands on tiny data: `tfam train graph --data karate`, on the user's CSV of
SMILES; `tfam predict` on a SMILES, on the club's members and the invalid-SMILES line;
`tfam viz graph` writes a PNG."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("rdkit", reason="molecules need rdkit (pip install rdkit)")
pytest.importorskip("networkx", reason="the karate club and graph drawings need networkx")

pytestmark = pytest.mark.usefixtures("one_thread")

MOLECULES = (
    "smiles,tpsa\nCCO,20.23\nc1ccccc1,0\nCC(=O)O,37.3\nCCN,26.02\nOCCO,40.46\nCC(N)=O,43.09\n"
)


@pytest.fixture(scope="module")
def karate_run(tmp_path_factory) -> Path:
    import tfam.cli

    out = tmp_path_factory.mktemp("karate") / "run"
    code = tfam.cli.main(
        ["train", "graph", "--data", "karate", "--out", str(out), "--epochs", "1", "--quiet"]
    )
    assert code == 0
    return out


@pytest.fixture(scope="module")
def molecule_run(tmp_path_factory) -> Path:
    import tfam.cli

    root = tmp_path_factory.mktemp("molecules")
    (root / "mols.csv").write_text(MOLECULES)
    out = root / "run"
    argv = ["train", "graph", "--data", str(root / "mols.csv"), "--out", str(out)]
    assert tfam.cli.main([*argv, "--epochs", "1", "--set", "dim=16", "--quiet"]) == 0
    return out


def test_train_karate_writes_a_graph_run(karate_run: Path) -> None:
    facts = json.loads((karate_run / "graph.json").read_text())
    assert facts["data"] == "karate" and facts["inputs"] == "nodes"
    assert facts["classes"] == ["Mr. Hi", "Officer"]
    results = json.loads((karate_run / "results.json").read_text())
    assert 0.0 <= results["test"]["acc"] <= 1.0
    config = json.loads((karate_run / "config.json").read_text())
    assert config["family"] == "graph" and config["attention"] == "edges"


def test_predict_members_of_the_club(cli, karate_run: Path) -> None:
    code, out, _ = cli(["predict", karate_run, "0", "8"])
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("node 0: ") and "labelled in training: Mr. Hi" in lines[0]
    assert lines[1].startswith("node 8: ") and (
        "the data says" in lines[1] or "labelled" in lines[1]
    )


def test_predict_a_molecule_and_the_invalid_smiles_line(cli, one_line, molecule_run: Path) -> None:
    facts = json.loads((molecule_run / "graph.json").read_text())
    assert facts["head"] == "value" and facts["inputs"] == "smiles"
    code, out, _ = cli(["predict", molecule_run, "CCO", "c1ccccc1O"])
    assert code == 0
    names = [line.split()[0] for line in out.splitlines()]
    values = [float(line.split()[1]) for line in out.splitlines()]
    assert names == ["CCO", "c1ccccc1O"] and all(v == v for v in values)
    code, out, err = cli(["predict", molecule_run, "CCO", "C1CC("])
    assert code == 2 and out == ""  # every SMILES is read before any output
    assert "SMILES 'C1CC(' is invalid" in one_line(err)


def test_viz_graph_writes_a_png_for_the_club_and_a_molecule(
    cli, karate_run: Path, molecule_run: Path, tmp_path: Path
) -> None:
    for argv in (
        [karate_run, "33", "--layer", "1", "--out", tmp_path / "member.png"],
        [molecule_run, "CC(=O)Nc1ccc(O)cc1", "--out", tmp_path / "mol.png"],
    ):
        code, out, _ = cli(["viz", "graph", *argv])
        assert code == 0, argv
        png = Path(str(argv[-1]))
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "graph attention" in out
