"""`tfam train` built from data: options from TrainConfig, the one --set parser, the one model
resolver, datasets from the catalog, and the user's own image folder end to end."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pytest
import torch
from PIL import Image

import tfam
from tfam.cli import build_parser
from tfam.cli.common import field_option, parse_set, parse_sets, parse_value, resolve_model
from tfam.data import DatasetEntry, ImageDataset, Recipe, registry
from tfam.training import TrainConfig

TINY = ["--set", "patch_size=4", "--set", "dim=16", "--set", "depth=1", "--set", "heads=2"]


def subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


# ----------------------------------------------------------------------- the --set typing rule


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("64", 64),
        ("0.1", 0.1),
        ("1e-3", 1e-3),
        ("-2", -2),
        ("true", True),
        ("False", False),
        ("none", None),
        ("null", None),
        ("8x12", (8, 12)),
        ("8 X 12", (8, 12)),
        ("[8, 8]", [8, 8]),
        ('{"window": 4}', {"window": 4}),
        ("mean", "mean"),
        ("gelu_tanh", "gelu_tanh"),
        ('"8x12"', "8x12"),  # a JSON string stays a string
    ],
)
def test_set_values_are_typed_by_one_rule(text: str, value) -> None:
    got = parse_value(text)
    assert got == value and type(got) is type(value)


def test_set_parser_keys_and_errors() -> None:
    assert parse_set('attention_options={"window":4}') == ("attention_options", {"window": 4})
    assert parse_set("image-size=8x12") == ("image_size", (8, 12))
    assert parse_sets(["dim=8", "dim=16"]) == {"dim": 16}  # the last one wins
    for bad in ("dim", "=5", "two words=1"):
        with pytest.raises(ValueError, match="expected KEY=VALUE"):
            parse_set(bad)
    with pytest.raises(ValueError, match=r"not valid JSON"):
        parse_set('attention_options={"window":')
    with pytest.raises(ValueError, match=r"'colour' is not a field of ViTConfig.*valid fields"):
        parse_sets(["colour=red"], ["dim", "depth"], "ViTConfig")


def test_train_and_explain_share_the_set_parser(cli) -> None:
    # explain and train read `8x12` and JSON the same way: both reach the config typed.
    code, out, _ = cli(
        ["explain", "vit", "--set", "image_size=8x12", "--set", "patch_size=4", "--set", "dim=8"]
        + ["--set", "heads=2", "--set", "depth=1", "--set", "in_channels=1", "--json"]
    )
    assert code == 0 and json.loads(out)["rows"]


# ------------------------------------------------------------------ options from dataclasses


def test_every_train_config_field_is_an_option() -> None:
    """A new TrainConfig field gets its option with no test to write: name, dest, default."""
    p = subparser("train")
    by_dest = {a.dest: a for a in p._actions}
    for f in dataclasses.fields(TrainConfig):
        action = by_dest.get(f.name)
        assert action is not None, f"TrainConfig.{f.name} has no `tfam train` option"
        assert field_option(f.name) in action.option_strings
        # Not given -> no value at all, so the recipe's or the dataclass's default applies.
        assert action.default is argparse.SUPPRESS
        assert action.help, f"--{f.name} has no help"


def test_train_options_reach_train_config(tmp_path: Path, monkeypatch) -> None:
    """Each option lands in the TrainConfig the trainer gets, typed (no CLI-side table)."""
    seen = {}

    class Stop(Exception):
        pass

    def fake_fit(self, resume=False):
        seen["config"] = self.config
        raise Stop

    import tfam.training

    monkeypatch.setattr(tfam.training.Trainer, "fit", fake_fit)
    argv = ["train", "vit", "--data", "digits", "--out", tmp_path / "r", "--quiet"]
    argv += ["--set", "dim=16", "--set", "depth=1", "--set", "heads=2", "--threads", "1"]
    argv += ["--epochs", "3", "--lr", "0.01", "--min-lr", "0.001", "--betas", "0.8", "0.9"]
    argv += ["--clip-grad", "none", "--max-steps", "2"]
    with pytest.raises(Stop):
        tfam.cli.main([str(a) for a in argv])
    c = seen["config"]
    assert (c.epochs, c.lr, c.min_lr, c.betas, c.clip_grad, c.max_steps) == (
        3, 0.01, 0.001, (0.8, 0.9), None, 2
    )  # fmt: skip
    assert c.batch_size == 128 and c.label_smoothing == 0.1  # the digits recipe
    assert c.warmup_epochs == pytest.approx(0.3)  # the recipe's 5, capped at epochs / 10


def test_header_counts_threads_in_words(tmp_path: Path, monkeypatch, capsys) -> None:
    """The run's header says "1 thread", not "1 threads" (it printed the plural for one)."""

    class Stop(Exception):
        pass

    def fake_fit(self, resume=False):
        raise Stop

    import tfam.training

    monkeypatch.setattr(tfam.training.Trainer, "fit", fake_fit)
    before = torch.get_num_threads()
    try:
        for threads, words in (("1", "1 thread ->"), ("2", "2 threads ->")):
            argv = ["train", "vit", "--data", "digits", "--out", str(tmp_path / threads)]
            argv += ["--set", "dim=16", "--set", "depth=1", "--set", "heads=2"]
            with pytest.raises(Stop):
                tfam.cli.main(argv + ["--threads", threads, "--epochs", "1"])
            assert words in capsys.readouterr().out
    finally:
        torch.set_num_threads(before)


def test_explain_options_come_from_every_family_config() -> None:
    from tfam.config import config_class
    from tfam.models import MODEL_CLASSES

    p = subparser("explain")
    options = {s for a in p._actions for s in a.option_strings}
    for family in MODEL_CLASSES:
        for f in dataclasses.fields(config_class(family)):
            assert field_option(f.name) in options, f"{family}.{f.name} has no explain flag"


# ----------------------------------------------------------------------- the one resolver


def test_model_resolver(tmp_path: Path) -> None:
    assert resolve_model("vit_digits").kind == "preset"
    assert resolve_model("vit").kind == "family"
    tfam.create_model("vit", image_size=8, patch_size=4, in_channels=1, num_classes=3, dim=8,
                      depth=1, heads=2).save_pretrained(tmp_path / "m")  # fmt: skip
    src = resolve_model(tmp_path / "m")
    assert (src.kind, src.family) == ("dir", "vit")
    assert src.load().config.num_classes == 3
    with pytest.raises(ValueError, match=r"--init 'nope' is invalid: expected a preset"):
        resolve_model("nope", what="--init")
    with pytest.raises(FileNotFoundError, match="run directory 'nope' not found"):
        resolve_model("nope", what="DIR", kinds=("dir",))
    with pytest.raises(FileNotFoundError, match="without config.json"):
        resolve_model(tmp_path, what="NAME")


# ------------------------------------------------------------------------------ the catalog


def test_a_registered_dataset_trains_with_no_cli_change(tmp_path: Path, monkeypatch, cli) -> None:
    """Registering a dataset is all it takes: `tfam train` lists, loads and trains it."""
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (24, 3, 8, 8), dtype=torch.uint8, generator=g)
    labels = torch.arange(24) % 2
    info = tfam.data.DatasetInfo("stripes", 8, 3, ("a", "b"), 255, 24, 0, "random test images")

    def loader(split, root=None, seed=0):
        keep, held = tfam.data.holdout_split(labels, 0.25, seed)
        idx = {"train": torch.arange(24), "fit": keep, "val": held}[split]
        return ImageDataset(images[idx], labels[idx], ("a", "b"), name="stripes", split=split)

    entry = DatasetEntry(
        name="stripes",
        task="image-classification",
        info=info,
        loader=loader,
        recipe=Recipe(train={"epochs": 1, "batch_size": 6}),
        splits=("train", "fit", "val"),
        test_split=None,
    )
    monkeypatch.setattr(registry, "_CATALOG", dict(registry._CATALOG))
    monkeypatch.setattr(registry, "_ALIASES", dict(registry._ALIASES))
    registry.register_dataset(entry)
    out = tmp_path / "run"
    code, _, err = cli(["train", "vit", "--data", "stripes", "--out", out, "--quiet", *TINY]
                       + ["--threads", "1"])  # fmt: skip
    assert code == 0, err
    assert json.loads((out / "preprocess.json").read_text())["classes"] == ["a", "b"]
    assert json.loads((out / "train_args.json").read_text())["train_config"]["batch_size"] == 6


# --------------------------------------------------------------------- the user's image folder


def test_image_folder_trains_predicts_and_evaluates(
    image_folder: Path, tmp_path: Path, cli
) -> None:
    out = tmp_path / "run"
    code, stdout, err = cli(
        ["train", "vit", "--data", image_folder, "--out", out, "--threads", "1", "--quiet"]
        + ["--epochs", "2", "--batch-size", "5", *TINY]
    )
    assert code == 0, err
    assert (out / "model.safetensors").is_file()
    assert (out / "curves.png").is_file()  # the curves callback the command line wires in
    pre = json.loads((out / "preprocess.json").read_text())
    assert pre["classes"] == ["bars", "columns", "spot"]
    assert pre["image_size"] == [8, 8] and pre["in_channels"] == 1 and pre["pixel_scale"] == 255
    assert pre["dataset"] == str(image_folder.resolve())
    assert tfam.from_pretrained(out).config.num_classes == 3

    code, stdout, err = cli(["predict", out, image_folder / "spot" / "000.png", "val:0",
                             "--top-k", "3", "--device", "cpu"])  # fmt: skip
    assert code == 0, err
    blocks = stdout.strip().split("\n\n")
    assert len(blocks) == 2 and "000.png" in blocks[0] and "true class" in blocks[1]
    for block in blocks:
        probs = [float(ln.split()[-1]) for ln in block.splitlines()[1:]]
        assert len(probs) == 3 and sum(probs) == pytest.approx(1.0, abs=1e-3)

    code, stdout, err = cli(["eval", out, "--out", tmp_path / "cm.png"])  # the val split
    assert code == 0, err
    assert f"on {image_folder.resolve()} val: 3 images" in stdout


def test_corrupt_file_in_image_folder_is_named(
    image_folder: Path, tmp_path: Path, cli, one_line
) -> None:
    (image_folder / "spot" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    code, _, err = cli(["train", "vit", "--data", image_folder, "--out", tmp_path / "r", *TINY])
    assert code == 2
    line = one_line(err)
    assert "broken.png" in line and "cannot read" in line
    assert not (tmp_path / "r").exists()


# ------------------------------------------------ options passed through to the trainer


def test_nproc_launches_torchrun_with_the_same_command(monkeypatch, cli) -> None:
    import tfam.training.distributed as distributed

    calls = []
    monkeypatch.setattr(distributed, "launch", lambda n, argv, **kw: calls.append((n, argv)) or 0)
    argv = ["train", "vit", "--data", "digits", "--nproc", "2", "--epochs", "1", "--quiet"]
    code, _, err = cli(argv)
    assert code == 0, err
    assert calls == [(2, ["train", "vit", "--data", "digits", "--epochs", "1", "--quiet"])]
    code, _, err = cli([*argv[:4], "--nproc=0"])
    assert code == 2 and "--nproc 0 is invalid" in err


def test_init_resume_and_extend(tmp_path: Path, cli, one_line) -> None:
    """--init names a bad source in one line; a finished run resumed is said to be finished;
    --resume --epochs N extends it."""
    base = ["train", "vit", "--data", "digits", "--quiet", "--threads", "1"]
    base += ["--set", "dim=16", "--set", "depth=1", "--set", "heads=2"]
    code, _, err = cli([*base, "--out", tmp_path / "x", "--init", "no_such_model"])
    assert code == 2 and "--init 'no_such_model' is invalid" in one_line(err)

    out = tmp_path / "run"
    code, _, err = cli([*base, "--out", out, "--epochs", "1", "--batch-size", "256"])
    assert code == 0, err
    code, stdout, err = cli(["train", "vit", "--data", "digits", "--out", out, "--resume"])
    assert code == 0, err
    assert "finished" in (stdout + err).lower()
    code, _, err = cli(["train", "vit", "--data", "digits", "--out", out, "--resume", "--quiet",
                        "--epochs", "2"])  # fmt: skip
    assert code == 0, err
    rows = (out / "metrics.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + 2  # header + two epochs

    # Fine-tuning from that run on an image folder with three classes: a new head.
    folder = tmp_path / "shapes"
    for i, name in enumerate(("a", "b", "c")):
        (folder / name).mkdir(parents=True)
        for j in range(4):
            Image.new("L", (8, 8), color=60 * i + 5 * j).save(folder / name / f"{j}.png")
    tuned = tmp_path / "tuned"
    code, _, err = cli([*base, "--data", folder, "--out", tuned, "--init", out, "--epochs", "1",
                        "--set", "patch_size=2"])  # fmt: skip
    assert code == 0, err
    assert tfam.from_pretrained(tuned).config.num_classes == 3
