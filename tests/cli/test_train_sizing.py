"""`tfam train` on the user's own data with no preset: the model and schedule sized from the
data, said in the header; values the user gives win; catalog data sets keep their recipes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tfam.data import get_dataset
from tfam.data.catalog import folder_entry
from tfam.training.autosize import size_entry


def write_image_folder(root: Path, per_class: int, size: int, seed: int = 0) -> Path:
    """root/{bars,columns,spot}/<i>.png: grey PNGs of three patterns with noise."""
    rng = np.random.default_rng(seed)
    for c, name in enumerate(("bars", "columns", "spot")):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            a = rng.integers(0, 40, (size, size)).astype(np.uint8)
            a[
                (slice(0, 3), slice(None), slice(2, 6))[c],
                (slice(None), slice(0, 3), slice(2, 6))[c],
            ] = 230
            Image.fromarray(a, mode="L").save(root / name / f"{i:03d}.png")
    return root


@pytest.fixture
def folder40(tmp_path: Path) -> Path:
    return write_image_folder(tmp_path / "photos", per_class=5, size=40)


def _train(cli, folder: Path, out: Path, *extra: str) -> tuple[str, dict, dict]:
    code, stdout, err = cli(["train", "vit", "--data", folder, "--out", out, "--max-steps", "2",
                             "--num-workers", "0", *extra])  # fmt: skip
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())
    args = json.loads((out / "train_args.json").read_text())
    return stdout, config, args


def test_a_40x40_folder_trains_with_the_readme_line_and_says_why(folder40, tmp_path, cli):
    stdout, config, args = _train(cli, folder40, tmp_path / "run")
    lines = stdout.splitlines()
    assert lines[0].startswith(f"image folder {folder40.resolve()}: 15 images in 3 classes")
    assert "12 fit / 3 val (20% stratified holdout, seeded)" in lines[0]
    assert lines[1].startswith("sized from the data: 40x40 images -> patch 5 (8x8 patches); ")
    assert "12 examples -> 4 blocks of width 64" in lines[1]
    assert "batch 12, 300 epochs = 300 steps" in lines[1]  # batch <= the 12 fit images
    assert lines[2].startswith("vit (") and "300 epochs of batch 12" in lines[2]
    assert (config["patch_size"], config["dim"], config["depth"]) == ([5, 5], 64, 4)
    assert config["position"] == "sincos2d" and config["pool"] == "mean"
    assert args["train_config"]["batch_size"] == 12 and args["threads"] == 1


def test_values_the_user_gives_win(folder40, tmp_path, cli):
    stdout, config, args = _train(cli, folder40, tmp_path / "run", "--set", "dim=32",
                                  "--set", "patch_size=4", "--batch-size", "4", "--epochs", "3",
                                  "--threads", "2")  # fmt: skip
    assert config["dim"] == 32 and config["heads"] == 1 and config["ffn_dim"] == 64
    assert config["patch_size"] == [4, 4]
    assert args["train_config"]["batch_size"] == 4 and args["train_config"]["epochs"] == 3
    assert args["threads"] == 2
    assert "batch 4, 3 epochs = 9 steps" in stdout and "patch 5" not in stdout


def test_a_preset_or_an_init_turns_the_sizing_off(folder40, tmp_path, cli):
    stdout, config, _ = _train(cli, folder40, tmp_path / "run", "--preset", "vit_digits",
                               "--set", "image_size=40", "--set", "patch_size=4")  # fmt: skip
    assert "sized from the data" not in stdout and config["dim"] == 64 and config["depth"] == 6
    entry = folder_entry(folder40)
    assert size_entry("vit", entry.task, entry, init="runs/x") == (entry, None)


def test_catalog_data_sets_keep_their_recipes() -> None:
    for name in ("digits", "fashion-mnist"):
        entry = get_dataset(name)
        assert size_entry("vit", entry.task, entry) == (entry, None)


def test_an_image_size_without_a_good_divisor_is_resized(tmp_path, cli):
    folder = write_image_folder(tmp_path / "odd", per_class=4, size=37)
    stdout, config, _ = _train(cli, folder, tmp_path / "run")
    assert "37x37 images resized to 40x40 -> patch 5 (8x8 patches)" in stdout
    assert config["image_size"] == [40, 40]
    pre = json.loads((tmp_path / "run" / "preprocess.json").read_text())
    assert pre["image_size"] == [40, 40]


def test_a_timm_folder_trains_on_its_splits_as_given(tmp_path, cli):
    root = tmp_path / "timm"
    write_image_folder(root / "train", per_class=4, size=16, seed=0)
    write_image_folder(root / "val", per_class=2, size=16, seed=1)
    write_image_folder(root / "test", per_class=2, size=16, seed=2)
    stdout, _, _ = _train(cli, root, tmp_path / "run")
    assert "splits as given (timm layout): 12 train/ / 6 val/ / 6 test/" in stdout
    assert "12 train / 6 val / 6 test images" in stdout
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["test"]["acc"] is not None


def test_a_timm_folder_with_a_class_missing_is_one_line(tmp_path, cli, one_line):
    root = tmp_path / "timm"
    write_image_folder(root / "train", per_class=2, size=8)
    write_image_folder(root / "val", per_class=2, size=8)
    for f in (root / "val" / "spot").iterdir():
        f.unlink()
    code, _, err = cli(["train", "vit", "--data", root, "--out", tmp_path / "run"])
    assert code == 2
    line = one_line(err)
    assert "val/ has no images of class 'spot'" in line and str(root.resolve()) in line
