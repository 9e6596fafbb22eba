"""`tfam eval` and `tfam predict` through the real entry point (tfam.cli.main), plus the metrics
(tfam.training.evaluation) and image preprocessing (tfam.data.vision.preprocess) they stand on.

The run directory is built here, not by `tfam train`: a tiny ViT trained for a few steps on the
digits, saved with save_pretrained, and a preprocess.json written by hand.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

import tfam
import tfam.cli
from tfam.data import load_dataset
from tfam.data.vision.preprocess import (
    Preprocess,
    border_is_bright,
    load_image,
    load_input,
    load_preprocess,
)
from tfam.training.evaluation import EvalResult, confusion_matrix, evaluate

TINY = dict(image_size=8, patch_size=2, in_channels=1, num_classes=10, dim=32, depth=2, heads=2)


def make_run_dir(path: Path, steps: int = 12, **overrides) -> Path:
    """A tiny ViT trained `steps` Adam steps on digits train (so its predictions differ from
    image to image), saved with its preprocess.json."""
    torch.manual_seed(0)
    model = tfam.create_model("vit", **{**TINY, **overrides})
    train = load_dataset("digits", "train")
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    model.train()
    # One thread for these tiny steps: on a busy shared machine, OpenMP threads spinning for
    # cores make them ~20x slower. Restored afterwards.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(steps):
            x, y = train.get_batch(torch.randint(len(train), (64,), generator=g))
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(path)
    pre = {
        "dataset": "digits",
        "image_size": [8, 8],
        "in_channels": 1,
        "mean": train.mean.tolist(),
        "std": train.std.tolist(),
        "classes": list(train.classes),
        "pixel_scale": 16.0,
    }
    (path / "preprocess.json").write_text(json.dumps(pre))
    return path


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return make_run_dir(tmp_path_factory.mktemp("run"))


@pytest.fixture
def cli(monkeypatch, capsys):
    """Run `tfam ARGV` -> (exit code, stdout, stderr), with only this file's commands registered
    so the test does not depend on the other subcommands' modules."""
    monkeypatch.setattr(tfam.cli, "COMMAND_MODULES", ["eval", "predict"])

    def run(argv: list[str]) -> tuple[int, str, str]:
        code = tfam.cli.main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def draw_seven(path: Path, ink: int = 0, paper: int = 255, size: int = 96) -> Path:
    """A digit-like '7': two thick strokes, ink on paper (default black on white)."""
    im = Image.new("L", (size, size), paper)
    d = ImageDraw.Draw(im)
    s = size / 128
    d.line([(30 * s, 25 * s), (98 * s, 25 * s)], fill=ink, width=round(14 * s))
    d.line([(98 * s, 25 * s), (55 * s, 110 * s)], fill=ink, width=round(14 * s))
    im.save(path)
    return path


def assert_png(path: Path) -> None:
    with Image.open(path) as im:
        assert im.format == "PNG"
        assert im.width > 0 and im.height > 0
        assert np.asarray(im.convert("L"), dtype=np.float64).var() > 0, "blank image"


# --- metrics ----------------------------------------------------------------------------------


def test_confusion_matrix_counts_by_hand() -> None:
    targets = torch.tensor([0, 0, 1, 2, 2, 2])
    preds = torch.tensor([0, 1, 1, 2, 0, 2])
    cm = confusion_matrix(targets, preds, 3)
    assert cm.tolist() == [[1, 1, 0], [0, 1, 0], [1, 0, 2]]
    assert cm.sum(dim=1).tolist() == [2, 1, 3]  # rows = true classes
    with pytest.raises(ValueError, match="predictions must lie in"):
        confusion_matrix(targets, torch.tensor([0, 1, 1, 2, 0, 3]), 3)


def test_eval_result_numbers() -> None:
    result = EvalResult(("a", "b", "c"), torch.tensor([[1, 1, 0], [0, 0, 0], [1, 0, 2]]), 0.5)
    assert (result.num_examples, result.correct) == (5, 3)
    assert result.accuracy == pytest.approx(0.6)
    acc = result.per_class_accuracy
    assert acc[0] == pytest.approx(0.5) and acc[2] == pytest.approx(2 / 3) and acc[1].isnan()
    d = result.to_dict()
    assert d["per_class"][1] == {"class": "b", "count": 0, "correct": 0, "accuracy": None}
    assert result.most_confused(5) == [("a", "b", 1), ("c", "a", 1)]


def test_evaluate_same_with_or_without_get_batch(run_dir: Path) -> None:
    model = tfam.from_pretrained(run_dir)
    test = load_dataset("digits", "test")
    pairs = [test[i] for i in range(50)]  # a plain list: the per-item path
    a = evaluate(model, pairs, batch_size=7, classes=test.classes)
    idx = torch.arange(50)
    x, y = test.get_batch(idx)
    b = evaluate(model, list(zip(x, y.tolist())), batch_size=50)
    assert torch.equal(a.confusion, b.confusion)
    assert a.loss == pytest.approx(b.loss, rel=1e-5)
    # Per example, in the data's order, across batch boundaries (7 does not divide 50).
    with torch.inference_mode():
        want = model.eval()(x).argmax(dim=1)
    assert torch.equal(a.predictions, want) and torch.equal(a.targets, y)
    assert torch.equal(a.correct_mask, want == y) and int(a.correct_mask.sum()) == a.correct
    with pytest.raises(ValueError, match="no per-example predictions"):
        EvalResult(("a",), torch.ones(1, 1, dtype=torch.int64), 0.0).correct_mask  # noqa: B018
    model.train()
    evaluate(model, pairs, batch_size=16)
    assert model.training, "evaluate must restore the model's train mode"


# --- tfam eval --------------------------------------------------------------------------------


def test_eval_prints_accuracy_table_and_writes_json_and_png(cli, run_dir: Path, tmp_path) -> None:
    out_png = tmp_path / "cm.png"
    code, out, err = cli(["eval", run_dir, "--out", out_png, "--batch-size", "64"])
    assert code == 0, err

    # An independent computation: raw test pixels normalised by hand with preprocess.json.
    pre = json.loads((run_dir / "preprocess.json").read_text())
    test = load_dataset("digits", "test")
    raw = test.images.to(torch.float64)
    x = ((raw / pre["pixel_scale"] - pre["mean"][0]) / pre["std"][0]).float()
    with torch.no_grad():
        pred = tfam.from_pretrained(run_dir)(x).argmax(dim=1)
    correct = int((pred == test.labels).sum())
    n = len(test)
    assert 0 < correct < n  # a trained-a-little model: neither all right nor all wrong

    assert f"accuracy: {100 * correct / n:.2f}% ({correct}/{n})" in out.splitlines()
    rows = [ln.split() for ln in out.splitlines() if re.fullmatch(r"\d\s+\d+\s+\d+\s+[\d.]+%", ln)]
    assert [r[0] for r in rows] == [str(i) for i in range(10)]
    counts = torch.bincount(test.labels, minlength=10)
    right = torch.bincount(test.labels[pred == test.labels], minlength=10)
    for r, count, ok in zip(rows, counts.tolist(), right.tolist()):
        assert (int(r[1]), int(r[2])) == (count, ok)
        assert float(r[3][:-1]) == pytest.approx(100 * ok / count, abs=0.006)

    data = json.loads((run_dir / "eval.json").read_text())
    for key in (
        "dataset",
        "split",
        "num_examples",
        "correct",
        "accuracy",
        "loss",
        "classes",
        "per_class",
        "confusion_matrix",
    ):
        assert key in data, key
    assert (data["dataset"], data["split"], data["num_examples"]) == ("digits", "test", n)
    assert data["accuracy"] == pytest.approx(correct / n)
    cm = torch.tensor(data["confusion_matrix"])
    assert cm.sum(dim=1).tolist() == counts.tolist()  # rows sum to class counts
    assert torch.equal(cm, confusion_matrix(test.labels, pred, 10))
    assert [p["count"] for p in data["per_class"]] == counts.tolist()
    assert_png(out_png)


def test_eval_default_png_and_errors(cli, run_dir: Path, tmp_path) -> None:
    code, out, _ = cli(["eval", run_dir, "--split", "train"])
    assert code == 0 and "digits train: 1437 images" in out
    assert_png(run_dir / "confusion.png")
    code, _, err = cli(["eval", tmp_path / "missing"])
    assert code == 2 and "not found" in err
    code, _, err = cli(["eval", run_dir, "--data", "cifar"])
    assert code == 2 and "unknown dataset 'cifar'" in err


# --- preprocessing ----------------------------------------------------------------------------


def test_preprocess_json_validation(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="preprocess.json"):
        load_preprocess(tmp_path)
    (tmp_path / "preprocess.json").write_text(json.dumps({"image_size": [8, 8]}))
    with pytest.raises(ValueError, match="lack in_channels"):
        load_preprocess(tmp_path)
    with pytest.raises(ValueError, match="mean"):
        Preprocess((8, 8), 1, (0.1, 0.2), (1.0,), ("a",), 16.0)


def test_black_on_white_is_inverted_to_match_white_on_black(run_dir: Path, tmp_path) -> None:
    pre = load_preprocess(run_dir)
    black_on_white = load_image(draw_seven(tmp_path / "bw.png", ink=0, paper=255), pre)
    white_on_black = load_image(draw_seven(tmp_path / "wb.png", ink=255, paper=0), pre)
    assert black_on_white.inverted and not white_on_black.inverted
    assert torch.equal(black_on_white.tensor, white_on_black.tensor)
    assert black_on_white.tensor.shape == (1, 8, 8)
    # After inversion the background is black: the corners hold the dataset's "0" value.
    black = (0 - pre.mean[0]) / pre.std[0]
    assert black_on_white.tensor[0, 0, 0].item() == pytest.approx(black)
    # Stored levels: every value is an integer count out of pixel_scale (0..16 for digits).
    levels = black_on_white.pixels * pre.pixel_scale
    assert np.allclose(levels, np.rint(levels)) and levels.max() == pre.pixel_scale
    # Forcing the choice overrides the border rule.
    assert not load_image(tmp_path / "bw.png", pre, invert=False).inverted
    assert load_image(tmp_path / "wb.png", pre, invert=True).inverted


def test_border_rule_and_rgb_data_are_not_inverted(tmp_path) -> None:
    ring = np.full((32, 32), 255.0)
    ring[4:28, 4:28] = 0
    assert border_is_bright(ring) and not border_is_bright(255 - ring)
    rgb = Preprocess((8, 8), 3, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25), ("a", "b"), 255.0)
    item = load_image(draw_seven(tmp_path / "bw.png"), rgb)
    assert not item.inverted and item.tensor.shape == (3, 8, 8)


def test_transparent_png_is_composited_over_white(run_dir: Path, tmp_path) -> None:
    pre = load_preprocess(run_dir)
    im = Image.new("RGBA", (64, 64), (0, 0, 0, 0))  # transparent black canvas
    ImageDraw.Draw(im).rectangle([24, 8, 40, 56], fill=(0, 0, 0, 255))
    im.save(tmp_path / "alpha.png")
    item = load_image(tmp_path / "alpha.png", pre)
    assert item.inverted  # the canvas reads as white paper, so the black bar becomes bright
    assert item.pixels[4, 4, 0] > 0.5 and item.pixels[4, 0, 0] == 0


def test_sample_spec_equals_the_dataset_sample(run_dir: Path) -> None:
    pre = load_preprocess(run_dir)
    item = load_input("test:3", pre)
    x, y = load_dataset("digits", "test")[3]
    assert item.label == y
    assert torch.allclose(item.tensor, x, atol=1e-6)
    with pytest.raises(ValueError, match="valid indices 0..359"):
        load_input("test:360", pre)


# --- tfam predict -----------------------------------------------------------------------------


def parse_predictions(out: str) -> list[tuple[str, list[tuple[str, float]]]]:
    blocks = []
    for line in out.splitlines():
        m = re.fullmatch(r"\s+(\d+)\. (.+?)\s+(\d\.\d{4})", line)
        if m:
            assert int(m.group(1)) == len(blocks[-1][1]) + 1
            blocks[-1][1].append((m.group(2), float(m.group(3))))
        elif line.strip():
            blocks.append((line, []))
    return blocks


def test_predict_top_k_sorted_and_consistent_with_the_model(cli, run_dir: Path, tmp_path) -> None:
    png = draw_seven(tmp_path / "seven.png")
    jpg = tmp_path / "seven.jpg"
    Image.open(png).convert("RGB").save(jpg, quality=95)
    code, out, err = cli(["predict", run_dir, png, jpg, "test:0", "--top-k", "3"])
    assert code == 0, err
    blocks = parse_predictions(out)
    assert len(blocks) == 3
    assert blocks[0][0].startswith(str(png)) and "inverted" in blocks[0][0]
    assert "true class" in blocks[2][0]
    pre = load_preprocess(run_dir)
    model = tfam.from_pretrained(run_dir)
    for (_, top), spec in zip(blocks, (png, jpg, "test:0")):
        probs = [p for _, p in top]
        assert len(top) == 3
        assert probs == sorted(probs, reverse=True)
        assert sum(probs) <= 1 + 1e-3
        with torch.no_grad():
            expect = model(load_input(spec, pre).tensor[None]).softmax(-1)[0]
        best = int(expect.argmax())
        assert top[0][0] == pre.classes[best]
        assert top[0][1] == pytest.approx(float(expect[best]), abs=5e-5)

    # k larger than the number of classes lists every class; probabilities then sum to 1.
    code, out, _ = cli(["predict", run_dir, png, "--top-k", "50"])
    ((_, top),) = parse_predictions(out)
    assert code == 0 and sorted(c for c, _ in top) == list(pre.classes)
    assert sum(p for _, p in top) == pytest.approx(1.0, abs=1e-3)


def test_predict_clear_errors(cli, run_dir: Path, tmp_path) -> None:
    code, out, err = cli(["predict", run_dir, tmp_path / "nope.png"])
    assert code == 2 and out == "" and "nope.png" in err and "not found" in err
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"this is not a PNG")
    code, _, err = cli(["predict", run_dir, bad])
    assert code == 2 and "cannot read" in err and "bad.png" in err
    code, _, err = cli(["predict", run_dir, "test:0", "--top-k", "0"])
    assert code == 2 and "--top-k 0" in err


def test_help_has_examples(cli, capsys) -> None:
    for command in ("eval", "predict"):
        with pytest.raises(SystemExit) as exit_info:
            tfam.cli.main([command, "--help"])
        assert exit_info.value.code == 0
        text = capsys.readouterr().out
        assert "examples:" in text and f"tfam {command} runs/digits" in text
