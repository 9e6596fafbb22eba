"""Your own images for every vision family: `tfam train <family> --data FOLDER` sizes the
family's model from the images (each family's choices said in the header), trains on a class
folder or timm's train/ val/ test/ layout, and `tfam eval` / `tfam predict` (image families)
or `tfam generate` (iGPT: the folder's test images completed) read the run back."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import tfam.viz
from tfam.data.catalog import folder_entry
from tfam.data.sources.images import DatasetInfo
from tfam.training.autosize import entry_for_family, pixel_side, size_from_data

pytestmark = pytest.mark.usefixtures("one_thread")

QUICK = ["--max-steps", "2", "--num-workers", "0", "--threads", "1"]


def write_image_folder(root: Path, per_class: int, seed: int = 0) -> Path:
    """root/{bars,columns,spot}/<i>.png: grey 8x8 PNGs of three patterns with noise."""
    rng = np.random.default_rng(seed)
    for c, name in enumerate(("bars", "columns", "spot")):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            a = rng.integers(0, 40, (8, 8)).astype(np.uint8)
            a[
                (slice(0, 3), slice(None), slice(2, 6))[c],
                (slice(None), slice(0, 3), slice(2, 6))[c],
            ] = 230
            Image.fromarray(a, mode="L").save(root / name / f"{i:03d}.png")
    return root


@pytest.fixture(autouse=True)
def no_curves(monkeypatch) -> None:
    """The training curves are drawn after every run (seconds of matplotlib on a loaded CPU);
    these tests read other files."""
    monkeypatch.setattr(tfam.viz, "plot_curves", lambda *args, **kwargs: None)


@pytest.fixture(scope="module")
def timm(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("vision") / "timm"
    write_image_folder(root / "train", per_class=4, seed=0)
    write_image_folder(root / "val", per_class=2, seed=1)
    write_image_folder(root / "test", per_class=2, seed=2)
    return root


def info(side: int, channels: int = 1) -> DatasetInfo:
    return DatasetInfo("x", side, channels, ("a", "b"), 255, 100, 0, "x")


# family -> (what the sizing line says for 8x8 grey images, config fields it chose)
SAID = {
    "cnn": ("8x8 images -> 3x3 stem (no pool), 3 stages at 8/4/2 px", {"stem": "small"}),
    "deit": ("no --teacher -> no distillation token", {"distilled": False, "patch_size": [1, 1]}),
    "swin": (
        "8x8 images -> patch 1 (8x8 patches), window 4 (2x2 windows), 2 stages at 8/4",
        {"window": 4, "depths": [2, 2]},
    ),  # fmt: skip
    "igpt": (
        "8x8 images, 16 grey levels of 0..255 -> [start] + 64 ids, 65 positions",
        {"max_positions": 65, "vocab_size": 17},
    ),  # fmt: skip
}


@pytest.mark.parametrize("family", sorted(SAID))
def test_a_timm_folder_trains_evaluates_and_predicts(family, timm, cli, tmp_path) -> None:
    out = tmp_path / family
    code, stdout, err = cli(["train", family, "--data", timm, "--out", out, *QUICK])
    assert code == 0, err
    said, fields = SAID[family]
    sizing = next(ln for ln in stdout.splitlines() if ln.startswith("sized from the data: "))
    assert said in sizing, sizing
    config = json.loads((out / "config.json").read_text())
    assert {k: config[k] for k in fields} == fields
    assert "12 train / 6 val / 6 test images" in stdout
    code, stdout, err = cli(["eval", out])
    assert code == 0, err
    if family == "igpt":
        palette = json.loads((out / "palette.json").read_text())
        assert palette["kind"] == "grey" and palette["image_shape"] == [1, 8, 8]
        assert palette["dataset"] == str(timm.resolve())
        grid = tmp_path / "grid.png"
        code, stdout, err = cli(["generate", out, "--images", "2", "--samples", "1", "--seed", "0",
                                 "--out", grid])  # fmt: skip
        assert code == 0, err
        assert f"completed 2 test images of {timm.resolve()} from their top 4 of 8 rows" in stdout
        assert grid.stat().st_size > 0
    else:
        image = next((timm / "test" / "spot").iterdir())
        code, stdout, err = cli(["predict", out, image])
        assert code == 0, err
        assert {"bars", "columns", "spot"} <= set(stdout.split())


def test_a_class_folder_trains_with_a_seeded_holdout(image_folder, cli, tmp_path) -> None:
    code, stdout, err = cli(["train", "swin", "--data", image_folder, "--out", tmp_path / "r",
                             *QUICK])  # fmt: skip
    assert code == 0, err
    assert "15 fit / 3 val (20% stratified holdout, seeded)" in stdout
    assert "15 train / 3 val images" in stdout


def test_igpt_on_a_class_folder_completes_its_val_images(image_folder, cli, tmp_path) -> None:
    """No test/ folder: `tfam generate` completes the validation holdout."""
    out = tmp_path / "run"
    code, _, err = cli(["train", "igpt", "--data", image_folder, "--out", out, *QUICK, "--quiet"])
    assert code == 0, err
    code, stdout, err = cli(["generate", out, "--images", "1", "--samples", "1", "--greedy",
                             "--out", tmp_path / "g.png"])  # fmt: skip
    assert code == 0, err
    assert "completed 1 val images" in stdout
    # Fine-tuned as a classifier of the folder's classes: eval scores it as one.
    tuned = tmp_path / "tuned"
    code, _, err = cli(["train", "igpt", "--data", image_folder, "--task", "classify", "--init",
                        out, "--out", tuned, *QUICK, "--quiet"])  # fmt: skip
    assert code == 0, err
    code, stdout, err = cli(["eval", tuned])
    assert code == 0, err
    assert {"bars", "columns", "spot", "accuracy"} <= set(stdout.split())


def test_predict_on_an_igpt_run_is_one_line(tmp_path, image_folder, cli, one_line) -> None:
    out = tmp_path / "run"
    code, _, err = cli(["train", "igpt", "--data", image_folder, "--out", out, *QUICK, "--quiet",
                        "--set", "dim=16", "--set", "depth=1"])  # fmt: skip
    assert code == 0, err
    code, _, err = cli(["predict", out, next((image_folder / "spot").iterdir())])
    line = one_line(err)
    assert code == 2 and f"DIR {str(out)!r} is invalid for predict" in line
    assert f"`tfam generate {out}` completes them" in line


def test_the_sizers_follow_the_image_size() -> None:
    cnn = size_from_data("cnn", "image-classification", info(224), 50_000)
    assert cnn.model["stem"] == "resnet" and cnn.model["hidden_sizes"] == (64, 128, 256, 512)
    assert cnn.model["depths"] == (2, 2, 2, 2)
    assert "7x7/2 stem + pool, 4 stages at 56/28/14/7 px" in cnn.line
    swin = size_from_data("swin", "image-classification", info(28), 60_000)
    assert (swin.model["patch_size"], swin.model["window"], swin.model["depths"]) == (2, 7, (2, 2))
    assert (swin.model["dim"], swin.model["heads"]) == (96, 3)
    odd = size_from_data("swin", "image-classification", info(37), 100)
    assert odd.image_size == 40 and odd.model["patch_size"] == 4 and odd.model["window"] == 5
    assert "37x37 images resized to 40x40 -> patch 4 (10x10 patches), window 5" in odd.line
    deit = size_from_data("deit", "image-distillation", info(32), 100)
    assert deit.model["distilled"] is True and "a teacher -> a distillation token" in deit.line
    given = size_from_data("cnn", "image-classification", info(32), 100, {"depths": [1, 1]})
    assert given.model["hidden_sizes"] == (16, 32) and "depths" not in given.model
    assert [pixel_side(s, s) for s in (8, 28, 40, 224)] == [(8, 8), (14, 14), (13, 13), (16, 16)]


def test_a_colour_folder_gets_a_kmeans_palette(tmp_path) -> None:
    rng = np.random.default_rng(0)
    for name, colour in (("red", (200, 20, 20)), ("blue", (20, 20, 200))):
        (tmp_path / name).mkdir()
        for i in range(3):
            a = np.clip(rng.normal(colour, 10, (20, 20, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(a, mode="RGB").save(tmp_path / name / f"{i}.png")
    entry = entry_for_family("igpt", folder_entry(tmp_path))
    assert entry.task == "causal-lm" and entry.info.image_shape == (3, 10, 10)
    assert entry.info.palette == "16 k-means colours" and entry.info.vocab_size == 17
    assert "20x20 -> 10x10 images, 16 k-means colours" in entry.info.description
    ids, label = entry.load("fit")[0]
    assert ids.shape == (101,) and int(ids[0]) == 16 and int(ids[1:].max()) < 16
    # The image families read the folder as images.
    assert entry_for_family("vit", folder_entry(tmp_path)).task == "image-classification"
