"""The weight average (``ema``): the update is the formula, evaluation and the best epoch see
the average, the saved model is it, training itself is untouched, a killed run resumes bit for
bit, a refit starts the average afresh, and the command line keeps the option on resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

import tfam
from tfam.data import load_dataset
from tfam.training import TrainConfig, Trainer, read_checkpoint
from tfam.training.ema import WeightEMA

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(image_size=8, patch_size=2, in_channels=1, num_classes=10, dim=16, depth=1, heads=2)


def tiny_vit(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return tfam.create_model("vit", **TINY, init_std=0.1)


@pytest.fixture(scope="module")
def digits():
    return (
        load_dataset("digits", "fit"),
        load_dataset("digits", "val"),
        load_dataset("digits", "test"),
    )


class WithBuffers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)
        self.norm = nn.BatchNorm1d(2)


def test_update_is_the_warmed_up_formula_and_integer_buffers_are_copied() -> None:
    torch.manual_seed(0)
    model = WithBuffers()
    ema = WeightEMA(model, 0.9)
    expected = {k: v.detach().double().clone() for k, v in model.state_dict().items()}
    for n in range(30):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        model.train()
        model.norm(torch.randn(4, 2))  # moves the running statistics and the step count
        d = min(0.9, (1 + n) / (10 + n))
        assert ema.current_decay() == pytest.approx(d)
        ema.update(model)
        for k, v in model.state_dict().items():
            if v.is_floating_point():
                expected[k] = d * expected[k] + (1 - d) * v.double()
            else:
                expected[k] = v.double()
    assert ema.updates == 30
    for k, avg in ema.shadow.items():
        torch.testing.assert_close(avg.double(), expected[k], rtol=1e-6, atol=1e-6)
    assert ema.shadow["norm.num_batches_tracked"].item() == 30
    # The first steps follow the weights (d = 0.1, 0.18, ...), later ones the decay.
    assert WeightEMA(model, 0.9999).current_decay() == pytest.approx(0.1)


def test_swap_is_exact_and_undone_on_error() -> None:
    torch.manual_seed(0)
    model = WithBuffers()
    ema = WeightEMA(model, 0.5)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    live = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(RuntimeError, match="inside"):
        with ema.swapped(model):
            for k, v in model.state_dict().items():
                assert torch.equal(v, before[k]), k
            raise RuntimeError("inside")
    for k, v in model.state_dict().items():
        assert torch.equal(v, live[k]), k
        assert torch.equal(ema.shadow[k], before[k]), k


def test_state_dict_round_trip_and_bad_decay() -> None:
    model = WithBuffers()
    ema = WeightEMA(model, 0.99)
    ema.update(model)
    other = WeightEMA(WithBuffers(), 0.99)
    other.load_state_dict(ema.state_dict())
    assert other.updates == 1
    assert all(torch.equal(other.shadow[k], v) for k, v in ema.shadow.items())
    for bad in (0.0, 1.0, 1.5, -0.1):
        with pytest.raises(ValueError, match=rf"ema={bad!r} is invalid: expected a decay"):
            WeightEMA(model, bad)
        with pytest.raises(ValueError, match=r"ema=.* is invalid"):
            TrainConfig(ema=bad)


def test_steps_update_the_average_of_the_live_weights(digits) -> None:
    """Trainer.step moves the live weights exactly as without ema, and the average follows
    them by the formula."""
    fit, _, _ = digits
    config = TrainConfig(epochs=1, batch_size=64, lr=3e-3, progress=False, quiet=True)
    plain = Trainer(tiny_vit(), fit, config=config)
    averaged = Trainer(tiny_vit(), fit, config=TrainConfig(**{**config.to_dict(), "ema": 0.8}))
    expected = {k: v.double().clone() for k, v in averaged.model.state_dict().items()}
    torch.manual_seed(1)
    for n in range(6):
        index = torch.randint(len(fit), (64,))
        images, labels = fit.get_batch(index)
        plain.train_step(images, labels)
        averaged.train_step(images, labels)
        d = min(0.8, (1 + n) / (10 + n))
        for k, v in averaged.model.state_dict().items():
            assert torch.equal(v, plain.model.state_dict()[k]), k
            expected[k] = d * expected[k] + (1 - d) * v.double()
    for k, avg in averaged.ema.shadow.items():
        torch.testing.assert_close(avg.double(), expected[k], rtol=1e-5, atol=1e-6)


class EvalRecorder:
    """Scores a copy of the model holding the average at each epoch's end."""

    def __init__(self, val) -> None:
        self.val, self.rows = val, []

    def on_epoch_end(self, trainer, row) -> None:
        copy = tiny_vit()
        copy.load_state_dict(trainer.ema.shadow)
        copy.eval()
        images, labels = self.val.get_batch(torch.arange(len(self.val)))
        with torch.no_grad():
            correct = (copy(images).argmax(-1) == labels).sum().item()
        self.rows.append((row["val_acc"], correct / len(self.val)))


def test_validation_best_epoch_and_saved_model_are_the_average(digits, tmp_path: Path) -> None:
    fit, val, test = digits
    config = TrainConfig(
        epochs=4, batch_size=64, lr=3e-3, ema=0.9, progress=False, quiet=True, patience=None
    )
    recorder = EvalRecorder(val)
    trainer = Trainer(
        tiny_vit(), fit, test, config, out_dir=tmp_path, val_set=val, callbacks=[recorder]
    )
    result = trainer.fit()
    for shown, recomputed in recorder.rows:
        assert shown == pytest.approx(recomputed, abs=1e-12)
    results = json.loads((tmp_path / "results.json").read_text())
    saved = load_file(str(tmp_path / "model.safetensors"))
    best = results["saved"]["epoch"]
    last = read_checkpoint(tmp_path / "checkpoints" / "last.pt")
    # The checkpoint keeps the live weights and the average apart.
    assert last["ema"]["updates"] == last["global_step"]
    assert not all(torch.equal(last["model"][k], last["ema"]["weights"][k]) for k in saved)
    if best == results["epochs_completed"]:
        assert all(torch.equal(saved[k], last["ema"]["weights"][k]) for k in saved)
    else:
        kept = read_checkpoint(tmp_path / "checkpoints" / last["best"]["file"])
        assert all(torch.equal(saved[k], kept["model"][k]) for k in saved)
    # The test score is the saved model's.
    model = tiny_vit(seed=5)
    model.load_state_dict(saved)
    model.eval()
    images, labels = test.get_batch(torch.arange(len(test)))
    with torch.no_grad():
        acc = (model(images).argmax(-1) == labels).float().mean().item()
    assert result.final_test_acc == pytest.approx(acc, abs=1e-6)


def test_ctrl_c_then_resume_is_bit_exact_with_the_average(
    digits, tmp_path: Path, sigint_at
) -> None:
    fit, val, test = digits
    config = TrainConfig(epochs=2, batch_size=128, lr=2e-3, ema=0.95, progress=False, quiet=True)
    reference = tiny_vit()
    Trainer(
        reference, fit, test, config, out_dir=tmp_path / "a", val_set=val, augment=sigint_at(0)
    ).fit()
    out = tmp_path / "b"
    stopped = Trainer(
        tiny_vit(), fit, test, config, out_dir=out, val_set=val, augment=sigint_at(13)
    )
    with pytest.raises(KeyboardInterrupt):
        stopped.fit()
    model = tiny_vit(seed=123)
    Trainer(model, fit, test, config, out_dir=out, val_set=val, augment=sigint_at(0)).fit(
        resume=True
    )
    for name, tensor in reference.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name
    a = read_checkpoint(tmp_path / "a" / "checkpoints" / "last.pt")
    b = read_checkpoint(out / "checkpoints" / "last.pt")
    for name, tensor in a["ema"]["weights"].items():
        assert torch.equal(b["ema"]["weights"][name], tensor), name
    # Another decay is another run: refused.
    other = TrainConfig(**{**config.to_dict(), "ema": 0.9, "epochs": 3})
    with pytest.raises(ValueError, match=r"trained with ema=0.95, this run asks for ema=0.9"):
        Trainer(tiny_vit(), fit, test, other, out_dir=out, val_set=val).fit(resume=True)


def test_refit_starts_the_average_from_the_initial_weights(digits, tmp_path: Path) -> None:
    fit, val, test = digits
    config = TrainConfig(
        epochs=1, batch_size=128, lr=2e-3, ema=0.9, refit=True, progress=False, quiet=True
    )
    trainer = Trainer(tiny_vit(), fit, test, config, out_dir=tmp_path, val_set=val)
    trainer.fit()
    refit_steps = -(-(len(fit) + len(val)) // 128)
    assert trainer.ema.updates == refit_steps
    saved = load_file(str(tmp_path / "model.safetensors"))
    assert all(torch.equal(saved[k], v) for k, v in trainer.ema.shadow.items())


def test_cli_ema_is_checked_and_kept_on_resume(tmp_path: Path, capsys) -> None:
    from tfam.cli import main

    base = ["train", "vit", "--data", "digits", "--set", "dim=16", "--set", "depth=1"]
    base += ["--threads", "1", "--batch-size", "256", "--quiet"]
    assert main([*base, "--ema", "1.5", "--out", str(tmp_path / "bad")]) == 2
    assert "--ema 1.5 is invalid: expected a decay in (0, 1)" in capsys.readouterr().err
    out = tmp_path / "run"
    assert main([*base, "--ema", "0.9", "--epochs", "1", "--out", str(out)]) == 0
    args = json.loads((out / "train_args.json").read_text())
    assert args["train_config"]["ema"] == 0.9
    assert main([*base, "--epochs", "2", "--out", str(out), "--resume"]) == 0
    args = json.loads((out / "train_args.json").read_text())
    assert args["train_config"]["ema"] == 0.9
    assert read_checkpoint(out / "checkpoints" / "last.pt")["ema"]["updates"] == 2 * 6


def test_in_memory_run_keeps_the_best_average(digits) -> None:
    """Without out_dir the best epoch's average is kept in memory; the model the run ends with
    scores that epoch's validation metrics again."""
    fit, val, test = digits
    config = TrainConfig(epochs=4, batch_size=64, lr=3e-3, ema=0.9, progress=False, quiet=True)
    trainer = Trainer(tiny_vit(), fit, test, config, val_set=val)
    result = trainer.fit()
    best = max(trainer.history, key=lambda r: (r["val_acc"], -r["epoch"]))
    again = trainer.evaluate_metrics(val)
    assert result.saved["epoch"] == best["epoch"]
    assert again["acc"] == pytest.approx(best["val_acc"], abs=1e-12)
    assert again["loss"] == pytest.approx(best["val_loss"], rel=1e-6)
