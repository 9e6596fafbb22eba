"""Validation split, early stopping, starting from trained weights, finished and extended runs,
and the curves callback."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import tfam
from tfam.data import load_dataset
from tfam.training import (
    CurvesCallback,
    TrainConfig,
    Trainer,
    load_init_weights,
    read_checkpoint,
    read_metrics_csv,
)


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class Synthetic:
    """Seeded 1x8x8 images; counts how many times it is read (to see when a split is used)."""

    def __init__(self, n: int = 200, seed: int = 0, classes: int = 10) -> None:
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, classes, (n,), generator=g)
        self.images = torch.randn(n, 1, 8, 8, generator=g) + self.labels.view(-1, 1, 1, 1) * 0.3
        self.reads = 0

    def __len__(self) -> int:
        return len(self.labels)

    def get_batch(self, idx: torch.Tensor):
        self.reads += 1
        return self.images[idx], self.labels[idx]


class Subset:
    """The images of ``dataset`` whose label is below ``classes`` (a get_batch dataset)."""

    def __init__(self, dataset, classes: int) -> None:
        x, y = dataset.get_batch(torch.arange(len(dataset)))
        keep = y < classes
        self.images, self.labels = x[keep], y[keep]

    def __len__(self) -> int:
        return len(self.labels)

    def get_batch(self, idx: torch.Tensor):
        return self.images[idx], self.labels[idx]


def tiny(num_classes: int = 10, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return tfam.create_model(
        "vit",
        image_size=8,
        patch_size=2,
        in_channels=1,
        num_classes=num_classes,
        dim=16,
        depth=1,
        heads=2,
    )


def config(**kw) -> TrainConfig:
    settings = dict(epochs=3, batch_size=50, lr=3e-3, quiet=True, progress=False, device="cpu")
    settings.update(kw)
    return TrainConfig(**settings)


def test_validation_split_is_used_per_epoch_and_test_once(tmp_path: Path) -> None:
    train, val, test = Synthetic(), Synthetic(80, seed=1), Synthetic(60, seed=2)
    trainer = Trainer(tiny(), train, test, config(), tmp_path / "run", val_set=val)
    result = trainer.fit()
    assert test.reads == 1  # one batch of 60, once, at the end
    assert val.reads == 3  # after each epoch
    rows = read_metrics_csv(tmp_path / "run" / "metrics.csv")
    assert "val_acc" in rows[0] and "test_acc" not in rows[0]
    accs = [r["val_acc"] for r in result.history]
    assert result.best_val_acc == max(accs) and result.final_val_acc == accs[-1]
    assert result.best_epoch == 1 + accs.index(max(accs))
    assert math.isnan(result.best_test_acc)  # no per-epoch test score exists
    direct = trainer.evaluate(test)
    assert (result.final_test_loss, result.final_test_acc) == pytest.approx(direct)
    assert result.test_metrics["acc"] == result.final_test_acc


def test_patience_stops_early_on_the_validation_split(tmp_path: Path) -> None:
    # A negligible lr makes the validation score stall, so early stopping must fire.
    train, val = Synthetic(), Synthetic(80, seed=1)
    cfg = config(epochs=20, lr=1e-9, min_lr=0.0, warmup_epochs=0.0, patience=2)
    result = Trainer(tiny(), train, None, cfg, tmp_path / "run", val_set=val).fit()
    assert result.stopped_early and result.epochs_completed < 20
    accs = [r["val_acc"] for r in result.history]
    best = accs.index(max(accs))
    assert len(accs) == best + 1 + 2  # stopped 2 epochs after the (first) best
    again = Trainer(tiny(), train, None, cfg, tmp_path / "run", val_set=val).fit(resume=True)
    assert again.already_finished and again.epochs_completed == result.epochs_completed


def test_resume_of_a_finished_run_says_so_and_changes_nothing(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    Trainer(tiny(), Synthetic(), Synthetic(60, 2), config(epochs=2), out).fit()
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    capsys.readouterr()
    result = Trainer(tiny(), Synthetic(), Synthetic(60, 2), config(epochs=2), out).fit(resume=True)
    text = capsys.readouterr().out
    assert "is already finished" in text and "2 epochs" in text and "epoch 3/2" not in text
    assert "larger epochs" in text
    assert result.already_finished and result.steps == 8 and result.epochs_completed == 2
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert before == after


def test_resume_with_more_epochs_extends_the_run(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    Trainer(tiny(), Synthetic(), Synthetic(60, 2), config(epochs=2), out).fit()
    capsys.readouterr()
    cfg = config(epochs=4, quiet=False)
    trainer = Trainer(tiny(), Synthetic(), Synthetic(60, 2), cfg, out)
    result = trainer.fit(resume=True)
    assert "extending the run from 2 to 4 epochs" in capsys.readouterr().out
    assert result.epochs_completed == 4 and result.steps == 16
    rows = read_metrics_csv(out / "metrics.csv")
    assert [r["epoch"] for r in rows] == [1, 2, 3, 4]
    assert rows[1]["lr"] == pytest.approx(1e-5)  # the first plan had ended at min_lr ...
    assert rows[2]["lr"] > 1e-4  # ... the new one steps up again ...
    assert rows[3]["lr"] == pytest.approx(1e-5)  # ... and ends at min_lr at the new last step
    assert read_checkpoint(out / "checkpoints" / "last.pt")["config"]["epochs"] == 4


def test_init_from_a_digits_run_fine_tunes_on_another_class_count(tmp_path: Path, capsys) -> None:
    def vit(num_classes: int, seed: int) -> torch.nn.Module:
        torch.manual_seed(seed)
        return tfam.create_model(
            "vit",
            image_size=8,
            patch_size=2,
            in_channels=1,
            num_classes=num_classes,
            dim=32,
            depth=2,
            heads=2,
            init_std=0.1,
        )

    digits, digits_test = load_dataset("digits", "train"), load_dataset("digits", "test")
    base = tmp_path / "digits"
    Trainer(vit(10, 0), digits, digits_test, config(epochs=3, batch_size=64), base).fit()
    trained = tfam.from_pretrained(base).state_dict()

    five, five_test = Subset(digits, 5), Subset(digits_test, 5)
    tune = dict(epochs=1, batch_size=64, warmup_epochs=0.2)
    model = vit(5, 1)
    fresh_head = model.state_dict()["head.weight"].clone()
    capsys.readouterr()
    trainer = Trainer(model, five, five_test, config(**tune, init=str(base)))
    assert capsys.readouterr().out == ""  # said when the run starts, not at construction
    for name, tensor in model.state_dict().items():  # copied before any step
        if name.startswith("head."):
            assert tensor.shape[0] == 5
        else:
            assert torch.equal(tensor, trained[name]), name
    assert torch.equal(model.state_dict()["head.weight"], fresh_head)
    result = trainer.fit()
    said = capsys.readouterr().out
    assert (
        f"init: {base} -> {len(trained) - 2} tensors copied, head reset (10 -> 5 classes)\n" in said
    )
    scratch = Trainer(vit(5, 1), five, five_test, config(**tune)).fit()
    # The same run from scratch: the body trained on all ten digits must give a clear lead.
    assert result.final_test_acc > scratch.final_test_acc + 0.15, (result, scratch)


def test_init_errors_name_the_value(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"init='nope' is invalid: expected a run directory"):
        load_init_weights(tiny(), "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"init='.*empty' is invalid"):
        load_init_weights(tiny(), str(tmp_path / "empty"))


def test_curves_callback_uses_the_plotter_it_is_given(tmp_path: Path) -> None:
    calls = []

    def plot(csv, out, title=None):
        calls.append((Path(csv).name, Path(out).name, title))
        Path(out).write_bytes(b"png")

    out = tmp_path / "run"
    run_args = {"title": "tiny on synthetic"}
    callback = CurvesCallback(plot)
    Trainer(
        tiny(), Synthetic(), None, config(epochs=1), out, run_args=run_args, callbacks=[callback]
    ).fit()
    assert calls == [("metrics.csv", "curves.png", "tiny on synthetic")]
    assert (out / "curves.png").read_bytes() == b"png"


def test_training_does_not_import_the_plotting_code() -> None:
    import ast

    root = Path(tfam.__file__).parent / "training"
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert not name.startswith(("tfam.viz", "tfam.cli")), (path.name, name)


def test_every_config_field_has_help_for_the_command_line() -> None:
    import dataclasses

    for f in dataclasses.fields(TrainConfig):
        assert isinstance(f.metadata.get("help"), str) and f.metadata["help"], f.name


def test_max_minutes_stops_at_a_step_then_finishes_as_usual(tmp_path: Path, capsys) -> None:
    train, val, test = Synthetic(), Synthetic(80, seed=1), Synthetic(60, seed=2)
    cfg = config(epochs=50, max_minutes=1e-9, quiet=False)  # out of time after the first step
    result = Trainer(tiny(), train, test, cfg, tmp_path / "run", val_set=val).fit()
    assert result.steps == 1 and result.stopped_early
    assert test.reads == 1, "the test split is still evaluated once at the end"
    assert (tmp_path / "run" / "model.safetensors").is_file()
    assert "stopped after max_minutes=1e-09 at step 1" in capsys.readouterr().out
    with pytest.raises(ValueError, match=r"max_minutes=0 is invalid"):
        config(max_minutes=0)


def test_results_json_holds_the_final_scores(tmp_path: Path) -> None:
    import json

    train, val, test = Synthetic(), Synthetic(80, seed=1), Synthetic(60, seed=2)
    result = Trainer(tiny(), train, test, config(epochs=2), tmp_path / "run", val_set=val).fit()
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    assert record["test"]["acc"] == result.final_test_acc
    assert record["val"]["acc"] == result.final_val_acc
    assert record["epochs_completed"] == 2 and record["steps"] == result.steps
