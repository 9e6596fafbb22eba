"""tfam.viz: attention rollout against its formula, attention maps against the model's own
weights, position similarity, and every picture (Python API and `tfam viz ...`) as a real,
non-blank PNG."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import tfam
import tfam.cli
from tfam.layers.position import sincos_2d_table
from tfam.viz import (
    attention_maps,
    attention_rollout,
    plot_attention,
    plot_confusion,
    plot_curves,
    plot_position_similarity,
    position_similarity,
)

TINY = dict(image_size=8, patch_size=2, in_channels=1, num_classes=10, dim=32, depth=2, heads=2)


def tiny_vit(**overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    return tfam.create_model("vit", **{**TINY, **overrides}).eval()


def assert_png(path: Path) -> tuple[int, int]:
    with Image.open(path) as im:
        assert im.format == "PNG"
        assert im.width > 0 and im.height > 0
        assert np.asarray(im.convert("L"), dtype=np.float64).var() > 0, "blank image"
        return im.size


def random_attention(layers: int, b: int, h: int, length: int, gen: torch.Generator) -> list:
    """Row-stochastic (B, H, L, L) matrices, like softmax attention."""
    return [
        torch.randn(b, h, length, length, generator=gen).mul(2).softmax(-1) for _ in range(layers)
    ]


# --- rollout ----------------------------------------------------------------------------------


def test_identity_attention_rolls_out_to_identity() -> None:
    eye = torch.eye(5).expand(2, 3, 5, 5)
    out = attention_rollout([eye, eye, eye])
    assert out.shape == (2, 5, 5)
    assert torch.allclose(out, torch.eye(5).expand(2, 5, 5))


def test_rollout_on_hand_built_matrices() -> None:
    # One head, two tokens. A1 = [[1, 0], [.5, .5]]: + I -> [[2, 0], [.5, 1.5]] -> rows / sums
    # -> [[1, 0], [.25, .75]]. A2 = [[0, 1], [1, 0]]: + I, renormalised -> all 0.5.
    a1 = torch.tensor([[[[1.0, 0.0], [0.5, 0.5]]]])
    a2 = torch.tensor([[[[0.0, 1.0], [1.0, 0.0]]]])
    r1 = torch.tensor([[1.0, 0.0], [0.25, 0.75]])
    r2 = torch.full((2, 2), 0.5)
    assert torch.allclose(attention_rollout([a1])[0], r1)
    # Later blocks multiply from the left: R = Â2 @ Â1.
    assert torch.allclose(attention_rollout([a1, a2])[0], r2 @ r1)
    assert torch.allclose(attention_rollout([a2, a1])[0], r1 @ r2)
    assert not torch.allclose(r2 @ r1, r1 @ r2)  # so the order above is really checked


def test_rollout_equals_the_formula_and_rows_sum_to_one(rng) -> None:
    atts = random_attention(layers=3, b=2, h=4, length=6, gen=rng)
    expected = []
    for b in range(2):
        r = np.eye(6)
        for a in atts:
            m = a[b].double().mean(0).numpy() + np.eye(6)  # average heads, add identity
            m /= m.sum(-1, keepdims=True)  # renormalise rows
            r = m @ r  # multiply through the blocks
        expected.append(r)
    out = attention_rollout(atts)
    assert np.allclose(out.numpy(), np.stack(expected), atol=1e-5)
    assert torch.allclose(out.sum(-1), torch.ones(2, 6), atol=1e-5)


def test_rollout_averages_heads_before_adding_identity(rng) -> None:
    atts = random_attention(layers=2, b=1, h=3, length=4, gen=rng)
    averaged = [a.mean(dim=1, keepdim=True) for a in atts]
    assert torch.allclose(attention_rollout(atts), attention_rollout(averaged), atol=1e-6)


def test_rollout_discard_ratio_drops_smallest_weights_per_row() -> None:
    a = torch.tensor([[[[0.1, 0.2, 0.7], [0.6, 0.3, 0.1], [0.2, 0.5, 0.3]]]])
    # ratio 0.34 of L=3 drops one weight per row (the smallest), then + I and renormalise.
    kept = torch.tensor([[0.0, 0.2, 0.7], [0.6, 0.3, 0.0], [0.0, 0.5, 0.3]]) + torch.eye(3)
    expected = kept / kept.sum(-1, keepdim=True)
    assert torch.allclose(attention_rollout([a], discard_ratio=0.34)[0], expected)
    assert torch.allclose(
        attention_rollout([a], discard_ratio=0.3)[0], (a[0, 0] + torch.eye(3)) / 2
    )
    with pytest.raises(ValueError, match="discard_ratio"):
        attention_rollout([a], discard_ratio=1.0)


def test_rollout_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="empty"):
        attention_rollout([])
    with pytest.raises(ValueError, match=r"\(B, H, L, L\)"):
        attention_rollout([torch.ones(1, 2, 3, 4)])


# --- attention maps from a model ----------------------------------------------------------------


def test_cls_maps_are_the_models_cls_row(rng) -> None:
    model = tiny_vit()
    x = torch.randn(1, 8, 8, generator=rng)
    with torch.no_grad():
        logits, atts = model(x[None], return_attention=True)
    for layer in (0, 1, -1):
        maps = attention_maps(model, x, layer=layer)
        assert maps.mode == "cls" and maps.heads.shape == (2, 4, 4)
        # [CLS] is token 0; patches follow row-major, so patch (i, j) is token 1 + 4 i + j.
        assert torch.allclose(maps.heads.reshape(2, 16), atts[layer][0, :, 0, 1:], atol=1e-6)
    assert torch.allclose(maps.rollout.flatten(), attention_rollout(atts)[0, 0, 1:], atol=1e-6)
    assert torch.allclose(maps.probs, logits.softmax(-1)[0], atol=1e-6)
    with pytest.raises(ValueError, match="layer=2"):
        attention_maps(model, x, layer=2)


def test_maps_are_the_same_whatever_the_kernel(rng) -> None:
    model = tiny_vit()
    x = torch.randn(1, 8, 8, generator=rng)
    model.set_attention("math")
    a = attention_maps(model, x)
    model.set_attention("sdpa")
    b = attention_maps(model, x)
    assert torch.allclose(a.heads, b.heads, atol=1e-5)
    assert torch.allclose(a.rollout, b.rollout, atol=1e-5)


def test_without_cls_token_maps_show_mean_attention_received(rng) -> None:
    model = tiny_vit(pool="mean", class_token=False)
    x = torch.randn(1, 8, 8, generator=rng)
    with torch.no_grad():
        _, atts = model(x[None], return_attention=True)
    maps = attention_maps(model, x)
    assert maps.mode == "mean"
    assert torch.allclose(maps.heads.reshape(2, 16), atts[-1][0].mean(dim=1), atol=1e-6)
    assert torch.allclose(maps.rollout.flatten(), attention_rollout(atts)[0].mean(0), atol=1e-6)


# --- position similarity ------------------------------------------------------------------------


def test_position_similarity_is_cosine_of_patch_embeddings() -> None:
    model = tiny_vit()
    with torch.no_grad():
        model.pos_embed.zero_()
        model.pos_embed[0, 0, 0] = 5.0  # [CLS] entry: must be left out
        model.pos_embed[0, 1:, 1] = 1.0  # every patch shares a component...
        model.pos_embed[0, 1 + 5, 2] = 1.0  # ...patch (1, 1) also has its own
    sim = position_similarity(model)
    assert sim.shape == (4, 4, 4, 4)
    assert torch.allclose(sim[0, 0, 3, 3], torch.tensor(1.0))
    assert sim[1, 1, 0, 0].item() == pytest.approx(1 / 2**0.5, abs=1e-6)
    assert torch.allclose(sim.reshape(16, 16).diagonal(), torch.ones(16))


def test_position_similarity_of_a_sincos2d_model_is_its_fixed_table(tmp_path) -> None:
    model = tiny_vit(position="sincos2d")
    unit = torch.nn.functional.normalize(sincos_2d_table((4, 4), model.config.dim), dim=-1)
    torch.testing.assert_close(position_similarity(model), (unit @ unit.T).reshape(4, 4, 4, 4))
    fig = plot_position_similarity(model, tmp_path / "pos.png")
    assert fig._suptitle.get_text().startswith("Fixed 2-D sine-cosine")
    assert_png(tmp_path / "pos.png")


def test_position_none_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="position='none'"):
        position_similarity(tiny_vit(position="none"))


# --- pictures through the Python API ------------------------------------------------------------


def test_plots_write_valid_pngs(tmp_path, rng) -> None:
    model = tiny_vit()
    image = torch.randn(1, 8, 8, generator=rng)
    plot_attention(model, image, tmp_path / "att.png", classes=[str(i) for i in range(10)], label=3)
    plot_attention(tiny_vit(pool="mean", class_token=False), image, tmp_path / "mean.png")
    plot_position_similarity(model, tmp_path / "pos.png")
    cm = torch.tensor([[5, 1, 0], [2, 7, 1], [0, 0, 9]])
    plot_confusion(cm, ["T-shirt/top", "Trouser", "Ankle boot"], tmp_path / "sub" / "cm.png")
    for name in ("att.png", "mean.png", "pos.png", "sub/cm.png"):
        assert_png(tmp_path / name)
    with pytest.raises(ValueError, match=r"expected \(2, 2\)"):
        plot_confusion(cm, ["a", "b"], tmp_path / "bad.png")


def write_metrics(path: Path, epochs: int = 4) -> Path:
    cols = [
        "epoch",
        "step",
        "train_loss",
        "train_acc",
        "test_loss",
        "test_acc",
        "lr",
        "seconds",
        "images_per_s",
    ]
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for e in range(1, epochs + 1):
            w.writerow([e, 10 * e, 2 / e, 1 - 0.5 / e, 2.2 / e, 0.9 - 0.5 / e, 1e-3 / e, e, 900])
    return path


def test_plot_curves(tmp_path) -> None:
    csv_path = write_metrics(tmp_path / "metrics.csv")
    fig = plot_curves(csv_path, tmp_path / "curves.png")
    assert_png(tmp_path / "curves.png")
    acc_axis = fig.axes[1]
    test_line = acc_axis.get_lines()[1]
    assert np.allclose(test_line.get_ydata(), [100 * (0.9 - 0.5 / e) for e in range(1, 5)])
    with pytest.raises(FileNotFoundError, match="metrics.csv"):
        plot_curves(tmp_path / "missing" / "metrics.csv", tmp_path / "x.png")
    (tmp_path / "empty.csv").write_text("epoch,train_loss\n")
    with pytest.raises(ValueError, match="no rows"):
        plot_curves(tmp_path / "empty.csv", tmp_path / "x.png")


# --- `tfam viz ...` -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A run directory as `tfam train` leaves it: model, preprocess.json, metrics.csv."""
    from tfam.data import load_dataset

    path = tmp_path_factory.mktemp("run")
    tiny_vit().save_pretrained(path)
    train = load_dataset("digits", "train")
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
    write_metrics(path / "metrics.csv")
    return path


@pytest.fixture
def cli(monkeypatch, capsys):
    """Run `tfam ARGV` -> (exit code, stdout, stderr) with only the viz command registered."""
    monkeypatch.setattr(tfam.cli, "COMMAND_MODULES", ["viz"])

    def run(argv: list) -> tuple[int, str, str]:
        code = tfam.cli.main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_viz_commands_write_valid_pngs(cli, run_dir: Path, tmp_path) -> None:
    digit = tmp_path / "digit.png"
    img = np.full((40, 40), 255, np.uint8)
    img[8:32, 18:24] = 0  # a black "1" on white paper
    Image.fromarray(img).save(digit)
    commands = {
        "att_file.png": ["attention", run_dir, digit, "--layer", "1"],
        "att_sample.png": ["attention", run_dir, "test:0", "--discard-ratio", "0.5"],
        "pos.png": ["pos", run_dir],
        "curves.png": ["curves", run_dir],
    }
    for name, argv in commands.items():
        code, out, err = cli(["viz", *argv, "--out", tmp_path / name])
        assert code == 0, err
        assert str(tmp_path / name) in out
        assert_png(tmp_path / name)
    code, _, _ = cli(["viz", "pos", run_dir])  # default output inside the run directory
    assert code == 0
    assert_png(run_dir / "position.png")


def test_viz_clear_errors(cli, run_dir: Path, tmp_path) -> None:
    code, _, err = cli(["viz", "attention", run_dir, "test:0", "--layer", "3"])
    assert code == 2 and "--layer 3" in err and "2 blocks" in err
    code, _, err = cli(["viz", "attention", run_dir, tmp_path / "nope.png"])
    assert code == 2 and "nope.png" in err
    none_dir = tmp_path / "nopos"
    tiny_vit(position="none").save_pretrained(none_dir)
    code, _, err = cli(["viz", "pos", none_dir])
    assert code == 2 and "position='none'" in err
    code, _, err = cli(["viz", "curves", none_dir])
    assert code == 2 and "metrics.csv not found" in err


def test_viz_help_has_examples(capsys, monkeypatch) -> None:
    monkeypatch.setattr(tfam.cli, "COMMAND_MODULES", ["viz"])
    for argv in (["viz"], ["viz", "attention"], ["viz", "pos"], ["viz", "curves"]):
        with pytest.raises(SystemExit) as exit_info:
            tfam.cli.main([*argv, "--help"])
        assert exit_info.value.code == 0
        text = capsys.readouterr().out
        assert "example" in text
        assert f"tfam {' '.join(argv)} runs/digits" in text or argv == ["viz"]
    assert "tfam viz attention runs/digits test:0" in cli_help(["viz"])


def cli_help(argv: list[str]) -> str:
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), pytest.raises(SystemExit):
        tfam.cli.main([*argv, "--help"])
    return buffer.getvalue()


def test_plot_curves_draws_the_validation_split_when_the_run_had_one(tmp_path) -> None:
    rows = ["epoch,step,train_loss,train_acc,val_loss,val_acc,lr"]
    rows += [
        f"{e},{10 * e},{1 / e},{0.5 + e / 10},{1.2 / e},{0.4 + e / 10},0.001" for e in (1, 2, 3)
    ]
    (tmp_path / "metrics.csv").write_text("\n".join(rows) + "\n")
    fig = plot_curves(tmp_path / "metrics.csv", tmp_path / "curves.png")
    labels = [
        line.get_label() for line in fig.axes[1].get_lines() if not line.get_label().startswith("_")
    ]
    assert labels == ["train", "val"]
    val_line = fig.axes[1].get_lines()[1]
    assert np.allclose(val_line.get_ydata(), [50.0, 60.0, 70.0])


def test_plot_curves_draws_the_refit_apart(tmp_path) -> None:
    # Selection run: epochs 1-3 with validation; refit: epochs 4-6, a fresh model on
    # train + val (no validation), its loss starting high again and its lr warming up anew.
    rows = ["epoch,step,train_loss,train_acc,val_loss,val_acc,lr,phase"]
    rows += [f"{e},{10 * e},{1 / e},{0.5 + e / 10},{1.2 / e},{0.4 + e / 10},0.001,1" for e in (1, 2, 3)]  # fmt: skip
    rows += [f"{e},{10 * e},{3 / (e - 3)},{0.4 + (e - 3) / 10},,,0.002,2" for e in (4, 5, 6)]
    (tmp_path / "metrics.csv").write_text("\n".join(rows) + "\n")
    fig = plot_curves(tmp_path / "metrics.csv", tmp_path / "curves.png")
    assert_png(tmp_path / "curves.png")
    loss, acc, lr = fig.axes
    lines = {line.get_label(): line for line in loss.get_lines()}
    assert list(lines)[:3] == ["train", "train (refit)", "val"]
    assert list(lines["train"].get_xdata()) == [1, 2, 3]  # not joined to the refit
    assert list(lines["train (refit)"].get_xdata()) == [4, 5, 6]
    assert lines["train (refit)"].get_linestyle() == "--"
    assert np.allclose(lines["train (refit)"].get_ydata(), [3.0, 1.5, 1.0])
    assert list(lines["val"].get_xdata()) == [1, 2, 3]
    for ax in (loss, acc, lr):
        boundary = [ln for ln in ax.get_lines() if list(ln.get_xdata()) == [3.5, 3.5]]
        assert len(boundary) == 1, ax.get_title()
    assert [len(ln.get_xdata()) for ln in lr.get_lines()][:2] == [3, 3]


def test_plot_curves_without_refit_draws_no_boundary(tmp_path) -> None:
    fig = plot_curves(write_metrics(tmp_path / "metrics.csv"), None)
    for ax in fig.axes:
        assert all(line.get_linestyle() != ":" for line in ax.get_lines())
