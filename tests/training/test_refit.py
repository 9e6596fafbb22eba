"""Refit (TrainConfig.refit): after the selection run, a fresh model trains on fit + val for as
many epochs, is the model saved and the one the test split scores; a kill in the refit resumes
bit for bit; the joined dataset keeps the get_batch fast path and the data's facts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import tfam
from tfam.data import load_dataset
from tfam.training import (
    TrainConfig,
    Trainer,
    join_splits,
    read_checkpoint,
    read_metrics_csv,
)
from tfam.training.refit import JoinedSplits, refit_steps
from tfam.training.trainer import KILL_ENV

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class Counted:
    """Seeded 1x8x8 images in 10 classes with a get_batch fast path; counts, per example, how
    often it was read for training (outside inference mode) and for evaluation (inside)."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 10, (n,), generator=g)
        self.images = torch.randn(n, 1, 8, 8, generator=g) + self.labels.view(-1, 1, 1, 1) * 0.3
        self.black = torch.tensor([-1.0])
        self.trained = torch.zeros(n, dtype=torch.int64)
        self.evaluated = torch.zeros(n, dtype=torch.int64)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        return self.images[i], int(self.labels[i])

    def get_batch(self, idx: torch.Tensor):
        idx = torch.as_tensor(idx)
        counts = self.evaluated if torch.is_inference_mode_enabled() else self.trained
        counts += torch.bincount(idx, minlength=len(self))
        return self.images[idx], self.labels[idx]


def splits():
    return Counted(200, seed=0), Counted(80, seed=1), Counted(60, seed=2)


def tiny() -> torch.nn.Module:
    torch.manual_seed(0)
    return tfam.create_model(
        "vit",
        image_size=8,
        patch_size=2,
        in_channels=1,
        num_classes=10,
        dim=16,
        depth=1,
        heads=2,
        dropout=0.1,  # so the refit's dropout stream matters
    )


def noise(images: torch.Tensor, generator: torch.Generator, fill=None) -> torch.Tensor:
    """An augmentation that draws from the trainer's augmentation generator."""
    return images + 0.1 * torch.randn(images.shape, generator=generator)


def config(**kw) -> TrainConfig:
    settings = dict(
        epochs=3, batch_size=50, lr=3e-3, quiet=True, progress=False, device="cpu", refit=True
    )
    settings.update(kw)
    return TrainConfig(**settings)


def test_refit_trains_a_fresh_model_on_fit_plus_val_and_saves_it(tmp_path: Path, capsys) -> None:
    fit, val, test = splits()
    out = tmp_path / "run"
    result = Trainer(tiny(), fit, test, config(quiet=False), out, augment=noise, val_set=val).fit()

    # Selection: 3 epochs on fit, val scored after each. Refit: 3 epochs on fit + val, nothing
    # scored. Test: read once, at the end.
    assert fit.trained.tolist() == [3 + 3] * 200
    assert val.trained.tolist() == [3] * 80 and val.evaluated.tolist() == [3] * 80
    assert test.trained.sum() == 0 and test.evaluated.tolist() == [1] * 60
    assert fit.evaluated.sum() == 0
    assert result.refit == {"epochs": 3.0, "steps": 18, "examples": 280}
    assert result.steps == 3 * 4 + 3 * 6 and result.epochs_completed == 3
    text = capsys.readouterr().out
    assert "refit: training a fresh model on fit + val (280 images) for 3 epochs" in text
    assert "final test accuracy" in text and "of the refit model" in text

    # The refit is a fresh run on fit + val from the same initial weights, bit for bit.
    fit2, val2, test2 = splits()
    reference = tiny()
    plain = config(refit=False)
    Trainer(reference, join_splits(fit2, val2), test2, plain, augment=noise).fit()
    saved = load_file(str(out / "model.safetensors"))
    for name, tensor in reference.state_dict().items():
        assert torch.equal(saved[name], tensor), name

    # The reported test score is the saved model's.
    model = tfam.from_pretrained(out)
    model.eval()
    with torch.no_grad():
        acc = (model(test.images).argmax(-1) == test.labels).double().mean().item()
    assert result.final_test_acc == pytest.approx(acc, abs=1e-12)
    record = json.loads((out / "results.json").read_text())
    assert record["test"]["acc"] == result.final_test_acc
    assert record["refit"] == {"epochs": 3.0, "steps": 18, "examples": 280}
    assert record["best_val"]["acc"] == result.best_val_acc
    assert record["val"]["acc"] == result.final_val_acc == result.history[2]["val_acc"]

    # metrics.csv: the selection's rows, then the refit's (numbers go on, phase 2, no val).
    rows = read_metrics_csv(out / "metrics.csv")
    assert [(r["epoch"], r["step"], r["phase"]) for r in rows] == [
        (1, 4, 1.0),
        (2, 8, 1.0),
        (3, 12, 1.0),
        (4, 18, 2.0),
        (5, 24, 2.0),
        (6, 30, 2.0),
    ]
    assert all(r["val_acc"] != r["val_acc"] for r in rows[3:])  # NaN: nothing left to score
    # The refit's schedule, fresh, takes the same values at the same epochs.
    assert [r["lr"] for r in rows[3:]] == pytest.approx([r["lr"] for r in rows[:3]], rel=1e-9)

    # A finished refit run says so and does nothing.
    capsys.readouterr()
    again = Trainer(tiny(), *splits()[::2], config(), out, val_set=Counted(80, 1)).fit(resume=True)
    assert again.already_finished and "is already finished" in capsys.readouterr().out


def test_refit_without_a_validation_split_is_refused() -> None:
    fit, _, test = splits()
    with pytest.raises(ValueError, match=r"refit=True is invalid without a validation split"):
        Trainer(tiny(), fit, test, config())
    with pytest.raises(ValueError, match=r"refit='yes' is invalid: expected True or False"):
        config(refit="yes")


def test_refit_false_leaves_the_run_as_it_was(tmp_path: Path) -> None:
    fit, val, test = splits()
    result = Trainer(tiny(), fit, test, config(refit=False), tmp_path / "r", val_set=val).fit()
    rows = read_metrics_csv(tmp_path / "r" / "metrics.csv")
    assert "phase" not in rows[0] and len(rows) == 3 and result.refit == {}
    assert "refit" not in json.loads((tmp_path / "r" / "results.json").read_text())
    assert fit.trained.tolist() == [3] * 200 and val.trained.sum() == 0


def test_a_selection_run_cut_short_sets_the_refit_length(tmp_path: Path) -> None:
    # max_steps=6 stops the selection after 1 epoch and 2 of its 4 steps: 1.5 epochs. The
    # refit makes 1.5 passes over fit + val (6 steps an epoch): 9 steps, on the schedule of
    # 3 epochs; max_steps does not cut the refit.
    fit, val, test = splits()
    out = tmp_path / "run"
    result = Trainer(tiny(), fit, test, config(max_steps=6), out, val_set=val).fit()
    assert result.refit == {"epochs": 1.5, "steps": 9, "examples": 280}
    assert result.steps == 15 and result.stopped_early and result.epochs_completed == 1
    # Val: after epoch 1, then once more on the weights the selection run ended with.
    assert val.evaluated.tolist() == [2] * 80 and test.evaluated.tolist() == [1] * 60
    rows = read_metrics_csv(out / "metrics.csv")
    assert [(r["epoch"], r["step"], r["phase"]) for r in rows] == [(1, 4, 1.0), (2, 12, 2.0)]
    state = read_checkpoint(out / "checkpoints" / "last.pt")
    assert (state["phase"], state["global_step"], state["batch_in_epoch"]) == (2, 15, 3)
    again = Trainer(tiny(), *splits()[::2], config(max_steps=6), out, val_set=Counted(80, 1))
    assert again.fit(resume=True).already_finished


def test_early_stopping_then_refit_for_as_many_epochs(tmp_path: Path) -> None:
    fit, val, test = splits()
    cfg = config(epochs=20, lr=1e-9, min_lr=0.0, warmup_epochs=0.0, patience=2)
    result = Trainer(tiny(), fit, test, cfg, tmp_path / "run", val_set=val).fit()
    selection = result.epochs_completed
    assert result.stopped_early and selection < 20
    assert result.refit["epochs"] == selection and result.refit["steps"] == 6 * selection
    assert fit.trained.tolist() == [2 * selection] * 200
    assert val.trained.tolist() == [selection] * 80


# ---------------------------------------------------------------------------------------------
# Kill -9 in the refit, resume: bit for bit the run that was never stopped

SCRIPT = textwrap.dedent(
    """
    import sys, torch, tfam
    from tfam.data import default_augment, load_dataset
    from tfam.training import TrainConfig, Trainer

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = tfam.create_model("vit", image_size=8, patch_size=2, in_channels=1, num_classes=10,
                              dim=16, depth=1, heads=2, dropout=0.1)
    fit, val, test = (load_dataset("digits", s) for s in ("fit", "val", "test"))
    config = TrainConfig(epochs=2, batch_size=128, lr=3e-3, save_every=5, refit=True,
                         quiet=False, progress=False, device="cpu")
    Trainer(model, fit, test, config, out_dir=sys.argv[1], val_set=val,
            augment=default_augment("digits")).fit(resume=len(sys.argv) > 2)
    """
)


def run_script(out: Path, *extra: str, kill: int | None = None):
    env = {k: v for k, v in os.environ.items() if k != KILL_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])
    if kill is not None:
        env[KILL_ENV] = str(kill)
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, str(out), *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_kill_in_the_refit_then_resume_is_bit_exact(tmp_path: Path) -> None:
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    done = run_script(straight)
    assert done.returncode == 0, done.stderr
    assert "refit: training a fresh model on fit + val (1437 images) for 2 epochs" in done.stdout

    # Selection: 2 epochs of ceil(1295 / 128) = 11 steps (1..22). Refit: 2 epochs of
    # ceil(1437 / 128) = 12 steps (23..46), checkpoints at its epoch end (34) and every 5
    # steps (35); step 38 is in the refit's second epoch, 3 steps after the last checkpoint.
    dead = run_script(killed, kill=38)
    assert dead.returncode == -signal.SIGKILL, dead.stderr
    assert not (killed / "model.safetensors").exists()
    state = read_checkpoint(killed / "checkpoints" / "last.pt")
    assert (state["phase"], state["epoch"], state["batch_in_epoch"]) == (2, 1, 1)
    assert state["global_step"] == 35 and state["refit_init"] is None
    assert read_checkpoint(killed / "checkpoints" / "prev.pt")["global_step"] == 34

    # Another epochs in the refit is refused: the selection run has set the refit's length.
    torch.manual_seed(0)
    model = tfam.create_model(
        "vit",
        image_size=8,
        patch_size=2,
        in_channels=1,
        num_classes=10,
        dim=16,
        depth=1,
        heads=2,
        dropout=0.1,
    )
    fit, val = load_dataset("digits", "fit"), load_dataset("digits", "val")
    other = TrainConfig(
        epochs=3, batch_size=128, lr=3e-3, save_every=5, refit=True, quiet=True, device="cpu"
    )
    with pytest.raises(ValueError, match=r"with epochs=3: it is in its refit"):
        Trainer(model, fit, None, other, killed, val_set=val).fit(resume=True)

    resumed = run_script(killed, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stdout and "refit epoch 2/2" in resumed.stdout
    a = load_file(str(straight / "model.safetensors"))
    b = load_file(str(killed / "model.safetensors"))
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    sa = read_checkpoint(straight / "checkpoints" / "last.pt")
    sb = read_checkpoint(killed / "checkpoints" / "last.pt")
    for pid, moments in sa["optimizer"]["state"].items():
        for key, value in moments.items():
            assert torch.equal(value, sb["optimizer"]["state"][pid][key]), (pid, key)
    for key in ("torch", "data", "augment"):
        assert torch.equal(sa["rng"][key], sb["rng"][key]), key
    ra, rb = read_metrics_csv(straight / "metrics.csv"), read_metrics_csv(killed / "metrics.csv")
    assert [r["phase"] for r in ra] == [1.0, 1.0, 2.0, 2.0]
    for x, y in zip(ra, rb, strict=True):
        for col in ("epoch", "step", "train_loss", "train_acc", "val_loss", "val_acc", "lr"):
            assert x[col] == y[col] or (x[col] != x[col] and y[col] != y[col]), col
    ja = json.loads((straight / "results.json").read_text())
    jb = json.loads((killed / "results.json").read_text())
    assert ja["test"] == jb["test"] and ja["refit"] == jb["refit"] == {
        "epochs": 2.0,
        "steps": 24,
        "examples": 1437,
    }

    finished = run_script(straight, "--resume")
    assert finished.returncode == 0 and "is already finished" in finished.stdout


# ---------------------------------------------------------------------------------------------
# The joined dataset


def test_joined_splits_keep_the_fast_path_the_order_and_the_facts() -> None:
    fit, val = load_dataset("digits", "fit"), load_dataset("digits", "val")
    joined = join_splits(fit, val)
    assert len(joined) == len(fit) + len(val) == 1437 and joined.split == "fit+val"
    idx = torch.tensor([len(fit) + 3, 0, 5, len(fit), 1436, 7])
    x, y = joined.get_batch(idx)
    items = [joined[int(i)] for i in idx]
    assert torch.equal(x, torch.stack([item[0] for item in items]))
    assert y.tolist() == [item[1] for item in items]
    assert torch.equal(joined[len(fit) + 3][0], val[3][0]) and joined[-1][1] == val[-1][1]
    one_part = joined.get_batch(torch.tensor([4, 2]))  # from one part: that part's answer
    assert torch.equal(one_part[0], fit.get_batch(torch.tensor([4, 2]))[0])
    # Facts of the data come from the first part; per-example arrays are joined.
    assert torch.equal(joined.black, fit.black) and joined.classes == fit.classes
    assert torch.equal(joined.labels, torch.cat([fit.labels, val.labels]))
    with pytest.raises(IndexError, match="index 1437 out of range for 1437 examples"):
        joined[1437]
    with pytest.raises(AttributeError):
        joined.no_such_attribute  # noqa: B018


def test_joined_splits_of_items_give_the_items_in_the_order_asked() -> None:
    # Pixel sequences (and utterances) answer get_batch with a list of items for the task to
    # collate; a batch drawn from both parts is those items, in the order asked.
    fit, val = load_dataset("digits-pixels", "fit"), load_dataset("digits-pixels", "val")
    joined = join_splits(fit, val)
    idx = torch.tensor([len(fit) + 3, 0, 5, len(fit), len(joined) - 1, 7])
    got = joined.get_batch(idx)
    assert isinstance(got, list) and len(got) == 6
    for (ids, label), i in zip(got, idx.tolist()):
        want_ids, want_label = joined[i]
        assert torch.equal(ids, want_ids) and label == want_label
    assert torch.equal(got[0][0], val.ids[3]) and got[1][1] == int(fit.labels[0])
    # Two rows of columns (a tuple of tensors) are still columns, not items.
    images = load_dataset("digits", "fit"), load_dataset("digits", "val")
    x, y = join_splits(*images).get_batch(torch.tensor([len(images[0]), 0]))
    assert x.shape[0] == 2 and y.tolist() == [int(images[1].labels[0]), int(images[0].labels[0])]


def test_joined_splits_without_get_batch_and_refusals() -> None:
    fit, val = load_dataset("digits", "fit"), load_dataset("digits", "val")

    class Items:
        def __init__(self, ds) -> None:
            self.ds, self.lengths = ds, [1] * len(ds)

        def __len__(self) -> int:
            return len(self.ds)

        def __getitem__(self, i: int):
            return self.ds[i]

    joined = join_splits(Items(fit), Items(val))
    assert type(joined) is JoinedSplits and not hasattr(joined, "get_batch")
    assert joined.lengths == [1] * 1437
    other = val.with_stats(mean=[0.5], std=[0.25])
    with pytest.raises(ValueError, match=r"refit: the splits to join differ in mean"):
        join_splits(fit, other)

    class Padded:
        def __init__(self, width: int) -> None:
            self.width = width

        def __len__(self) -> int:
            return 4

        def get_batch(self, idx):
            return {"input_ids": torch.zeros(len(idx), self.width, dtype=torch.int64)}

    with pytest.raises(ValueError, match=r"get_batch\(\)\['input_ids'\] give .* cannot be joined"):
        join_splits(Padded(3), Padded(5)).get_batch(torch.tensor([0, 5]))


def test_refit_steps_counts_passes_over_the_data() -> None:
    assert refit_steps(150, 0, 11, 12) == 1800  # digits: 150 epochs of fit, then of fit + val
    assert refit_steps(1, 2, 4, 6) == 9  # 1.5 epochs
    assert refit_steps(0, 1, 100, 100) == 1
