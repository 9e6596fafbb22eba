"""`tfam list` and `tfam explain` through the real entry point, tfam.cli.main."""

from __future__ import annotations

import json

import pytest

import tfam
import tfam.cli
from tfam.explain import explain
from tfam.models import PRESETS, count_parameters, create_config

TOY_ARGV = (
    "explain vit --image-size 8x12 --patch-size 4 --in-channels 1 --dim 10 --heads 2 "
    "--depth 1 --num-classes 3"
).split()


@pytest.fixture
def cli(monkeypatch, capsys):
    """Run `tfam ARGV` -> (exit code, stdout, stderr). Only this file's two commands are
    registered, so these tests do not depend on the other subcommands' modules."""
    monkeypatch.setattr(tfam.cli, "COMMAND_MODULES", ["list", "explain"])

    def run(argv: list[str]) -> tuple[int, str, str]:
        code = tfam.cli.main(argv)
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_list_shows_every_preset_with_exact_parameters(cli) -> None:
    code, out, _ = cli(["list"])
    assert code == 0
    lines = out.splitlines()
    for name in PRESETS:
        (line,) = [ln for ln in lines if ln.startswith(name + " ")]
        config = create_config(name)
        assert f" {count_parameters(name):,} " in line
        # Text presets (no patches) show "-" in the patch columns.
        patches = getattr(config, "num_patches", None)
        assert f" {patches if patches is not None else '-'} " in line
        assert PRESETS[name].description in line
    assert "vit_base_patch16_224" in out and "86,567,656" in out


def test_list_pattern(cli) -> None:
    _, out, _ = cli(["list", "vit_base*"])
    names = {ln.split()[0] for ln in out.splitlines()[2:] if ln.startswith("vit")}
    assert names == {"vit_base_patch16_224", "vit_base_patch32_224"}
    _, out, _ = cli(["list", "digits"])  # no wildcard: substring
    assert "vit_digits" in out and "vit_base" not in out


def test_list_json(cli) -> None:
    code, out, _ = cli(["list", "--json"])
    assert code == 0
    data = {d["name"]: d for d in json.loads(out)}
    assert set(data) == set(PRESETS)
    for name, info in data.items():
        config = create_config(name)
        assert info["params"] == count_parameters(name)
        assert info["num_patches"] == getattr(config, "num_patches", None)
        size = getattr(config, "image_size", None)
        assert info["image_size"] == (list(size) if size is not None else None)
        assert (info["dim"], info["depth"], info["heads"]) == (
            config.dim,
            config.depth,
            config.heads,
        )


def test_list_without_match_names_the_pattern(cli) -> None:
    code, out, err = cli(["list", "zzz"])
    assert code == 2 and out == ""
    assert "'zzz'" in err and "vit_digits" in err


def test_explain_reproduces_the_seed_toy_setting(cli) -> None:
    code, out, _ = cli(TOY_ARGV)
    assert code == 0
    assert "N = 2 x 3 = 6 patches" in out
    assert "H = 2 heads of Dh = 5" in out
    for shape in ("6 x 16", "6 x 10", "7 x 10", "3 x 2 x 7 x 5", "2 x 7 x 7"):
        assert shape in out, shape
    table = explain(
        "vit", image_size=(8, 12), patch_size=4, in_channels=1, dim=10, heads=2, depth=1,
        num_classes=3,
    )  # fmt: skip
    assert f"{table.total_params:,}" in out and f"{table.total_flops:,}" in out


def test_explain_help_shows_the_toy_example(cli, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli(["explain", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "tfam " + " ".join(TOY_ARGV) in out  # the example line, exactly as the brief asks
    assert "NAME" in out and "--blocks" in out


def test_explain_json_blocks_all_and_set(cli) -> None:
    code, out, _ = cli(
        ["explain", "vit_digits", "--blocks", "all", "--json", "--batch-size", "2"]
        + ["--set", "pool=mean", "--set", "class_token=false", "--set", "representation_size=8"]
    )
    assert code == 0
    data = json.loads(out)
    assert data["config"]["pool"] == "mean" and data["config"]["class_token"] is False
    steps = [r["step"] for r in data["rows"]]
    assert "+ [CLS]" not in steps and "pooling (mean of patches)" in steps
    model = tfam.create_model("vit_digits", pool="mean", class_token=False, representation_size=8)
    assert steps.count("MHSA") == model.config.depth and "pre-logits (Linear + tanh)" in steps
    assert data["total_params"] == model.num_parameters()
    assert all(r["input_shape"][0] == 2 for r in data["rows"])


def test_explain_model_directory(cli, tmp_path) -> None:
    model = tfam.create_model("vit_digits")
    model.save_pretrained(tmp_path)
    code, out, _ = cli(["explain", str(tmp_path), "--json"])
    assert code == 0
    assert json.loads(out)["total_params"] == model.num_parameters()


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["explain", "no_such_model"], ["NAME='no_such_model'", "vit_base_patch16_224", "vit"]),
        (["explain", "vit", "--set", "colour=red"], ["'colour'", "valid fields", "patch_size"]),
        (["explain", "vit", "--set", "dim"], ["--set 'dim'", "KEY=VALUE"]),
        (["explain", "vit", "--dim", "10", "--set", "dim=12"], ["--dim 10", "--set dim=12"]),
        (["explain", "vit", "--dim", "10", "--heads", "3"], ["heads=3", "[1, 2, 5, 10]"]),
        (["explain", "vit_digits", "--batch-size", "0"], ["--batch-size 0", "positive"]),
    ],
)
def test_explain_errors_name_argument_value_and_choices(cli, argv, expected) -> None:
    code, out, err = cli(argv)
    assert code == 2 and out == ""
    assert "Traceback" not in err
    for text in expected:
        assert text in err, (text, err)


def test_explain_bad_pair_is_an_argument_error(cli, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli(["explain", "vit", "--image-size", "8y12"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--image-size" in err and "'8y12'" in err and "8x12" in err
