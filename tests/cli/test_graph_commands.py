"""The graph commands on tiny data: `tfam train graph --data karate` (labelled members drawn by
--seed), on the user's CSV of SMILES; `tfam predict` on a SMILES, on the club's members and
the invalid-SMILES line; `tfam viz graph` writes a PNG; `tfam eval` of both runs."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import pytest

pytest.importorskip("rdkit", reason="molecules need rdkit (pip install rdkit)")
pytest.importorskip("networkx", reason="the karate club and graph drawings need networkx")

pytestmark = pytest.mark.usefixtures("one_thread")

MOLECULES = (
    "smiles,tpsa\nCCO,20.23\nc1ccccc1,0\nCC(=O)O,37.3\nCCN,26.02\nOCCO,40.46\nCC(N)=O,43.09\n"
)


def _train(argv: list[str], out: Path) -> None:
    """`tfam train` in-process; what it prints is kept in OUT/../train.txt."""
    import tfam.cli

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert tfam.cli.main([*argv, "--out", str(out), "--epochs", "1", "--no-progress"]) == 0
    (out.parent / "train.txt").write_text(printed.getvalue())


@pytest.fixture(scope="module")
def karate_run(tmp_path_factory) -> Path:
    # --seed 1: the run's seed draws the two labelled members beside 0 and 33.
    out = tmp_path_factory.mktemp("karate") / "run"
    _train(["train", "graph", "--data", "karate", "--seed", "1"], out)
    return out


@pytest.fixture(scope="module")
def molecule_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("molecules")
    (root / "mols.csv").write_text(MOLECULES)
    out = root / "run"
    _train(["train", "graph", "--data", str(root / "mols.csv"), "--set", "dim=16"], out)
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


def test_karate_members_come_from_the_seed(karate_run: Path) -> None:
    from tfam.data import get_dataset

    entry = get_dataset("karate")
    assert entry.seeded and not get_dataset("nci-tpsa").seeded

    def members(seed: int) -> list[int]:
        graph = entry.load("train", seed=seed)[0]
        return (graph.node_labels >= 0).nonzero().flatten().tolist()

    assert members(0) == [0, 16, 32, 33] and members(1) == [0, 6, 28, 33]
    facts = json.loads((karate_run / "graph.json").read_text())
    assert facts["seed"] == 1 and facts["labelled"] == [0, 6, 28, 33]
    printed = (karate_run.parent / "train.txt").read_text()
    assert "labelled members 0 (Mr. Hi), 6 (Mr. Hi), 28 (Officer), 33 (Officer)" in printed
    assert "4 train / 30 test labelled nodes" in printed


def test_train_line_names_what_a_split_holds(molecule_run: Path) -> None:
    from types import SimpleNamespace

    from tfam.cli.train import _items
    from tfam.data.sources.speech import SpeechDataset

    assert "5 train / 1 val molecules" in (molecule_run.parent / "train.txt").read_text()
    tagger = SimpleNamespace(name="frame-classification", unit="frames")  # counts frames
    assert _items(SpeechDataset.__new__(SpeechDataset), tagger) == "utterances"


def test_eval_a_node_run_on_the_unlabelled_members(cli, karate_run: Path) -> None:
    code, out, _ = cli(["eval", karate_run])
    assert code == 0
    assert (
        "30 labelled members of 1 graph (trained on members 0, 6, 28, 33, drawn by --seed 1)" in out
    )
    numbers = json.loads((karate_run / "eval.json").read_text())
    assert numbers["counted"] == 30 and numbers["trained_on"] == [0, 6, 28, 33]
    wrong = [w["node"] for w in numbers["wrong"]]
    assert not set(wrong) & {0, 6, 28, 33}
    assert numbers["correct"] == 30 - len(wrong)
    assert sum(row["count"] for row in numbers["per_class"]) == 30
    assert f"accuracy: {100 * numbers['acc']:.2f}% ({30 - len(wrong)}/30 members)" in out
    assert "Mr. Hi" in out and "Officer" in out
    for node in wrong:
        assert f"  member {node}: " in out
    assert Path(numbers["confusion_png"]).read_bytes()[:4] == b"\x89PNG"


def test_eval_a_regression_run_in_the_data_units(cli, molecule_run: Path, tmp_path: Path) -> None:
    png = tmp_path / "scatter.png"
    code, out, _ = cli(["eval", molecule_run, "--split", "train", "--out", png])
    assert code == 0 and "MAE: " in out and "RMSE: " in out and "R²: " in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    numbers = json.loads((molecule_run / "eval.json").read_text())
    worst = numbers["worst"]  # 5 training molecules: all of them, largest error first
    truth = dict(line.split(",") for line in MOLECULES.splitlines()[1:])
    assert len(worst) == 5 and {w["smiles"] for w in worst} <= set(truth)
    errors = [w["predicted"] - w["true"] for w in worst]
    assert all(w["true"] == pytest.approx(float(truth[w["smiles"]])) for w in worst)
    assert [abs(e) for e in errors] == sorted((abs(e) for e in errors), reverse=True)
    assert numbers["mae"] == pytest.approx(sum(abs(e) for e in errors) / 5)
    assert numbers["rmse"] == pytest.approx(math.sqrt(sum(e * e for e in errors) / 5))
    mean = sum(w["true"] for w in worst) / 5
    sst = sum((w["true"] - mean) ** 2 for w in worst)
    assert numbers["r2"] == pytest.approx(1 - sum(e * e for e in errors) / sst)
    for w in worst:
        assert w["smiles"] in out
    # tfam predict gives the same value for a molecule as the evaluation did.
    code, predicted, _ = cli(["predict", molecule_run, worst[0]["smiles"]])
    assert float(predicted.split()[1]) == pytest.approx(worst[0]["predicted"], abs=0.006)
