"""Devices and precision: a missing device is one clear line; fp16 with a gradient scaler
trains and resumes exactly; torch.compile equals eager."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from torch import nn

from tfam.training import TrainConfig, Trainer, available_devices, read_checkpoint, resolve_device
from tfam.training.devices import move_batch

NO_CUDA = not torch.cuda.is_available()


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class Images:
    """96 seeded 1x4x4 images in 3 classes with a get_batch fast path."""

    def __init__(self, n: int = 96, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 3, (n,), generator=g)
        self.images = torch.randn(n, 1, 4, 4, generator=g) + self.labels.view(-1, 1, 1, 1)

    def __len__(self) -> int:
        return len(self.labels)

    def get_batch(self, idx: torch.Tensor):
        return self.images[idx], self.labels[idx]


def mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 3))


@pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA")
def test_cuda_on_a_machine_without_it_is_one_clear_line() -> None:
    message = "device='cuda' is invalid: CUDA is not available on this machine; available: cpu"
    with pytest.raises(ValueError) as err:
        resolve_device("cuda")
    assert str(err.value).startswith(message)
    config = TrainConfig(device="cuda:1", epochs=1, batch_size=8)
    with pytest.raises(ValueError, match=r"device='cuda:1' is invalid: CUDA is not available"):
        Trainer(mlp(), Images(), None, config)


def test_device_names() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("CPU") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    if expected == "cpu" and "mps" in available_devices():
        expected = "mps"
    assert resolve_device("auto").type == expected
    assert available_devices()[0] == "cpu"
    with pytest.raises(ValueError, match=r"device='tpu' is invalid: expected auto, cpu, cuda"):
        resolve_device("tpu")


def test_move_batch_keeps_cpu_batches_as_they_are() -> None:
    batch = {"images": torch.zeros(2, 1, 4, 4), "labels": torch.zeros(2, dtype=torch.int64)}
    moved = move_batch(batch, torch.device("cpu"))
    assert all(moved[k] is batch[k] for k in batch)


def test_fp16_with_a_scaler_trains_and_resumes_exactly(tmp_path: Path) -> None:
    settings = dict(epochs=2, batch_size=16, lr=3e-3, precision="fp16", device="cpu", quiet=True)
    straight = Trainer(mlp(), Images(), Images(30, 1), TrainConfig(**settings))
    x = Images().images[:4]
    with straight._autocast():
        assert straight.model(x).dtype == torch.float16  # autocast is really on
    assert straight.scaler is not None
    before = {k: v.clone() for k, v in straight.model.state_dict().items()}
    result = straight.fit()
    assert result.steps == 12
    after = straight.model.state_dict()
    assert all(v.dtype == torch.float32 for v in after.values())  # master weights stay fp32
    assert any(not torch.equal(before[k], after[k]) for k in after)

    out = tmp_path / "run"
    Trainer(mlp(), Images(), Images(30, 1), TrainConfig(**settings, max_steps=7), out).fit()
    state = read_checkpoint(out / "checkpoints" / "last.pt")
    assert state["scaler"] is not None and state["scaler"]["scale"] > 0
    resumed = Trainer(mlp(seed=5), Images(), Images(30, 1), TrainConfig(**settings), out)
    resumed.fit(resume=True)
    for name, tensor in straight.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[name], tensor), name


def _compiler() -> str | None:
    return next((c for c in ("g++", "c++", "clang++") if shutil.which(c)), None)


@pytest.mark.skipif(
    _compiler() is None, reason="torch.compile needs a C++ compiler for CPU kernels; none found"
)
def test_compile_equals_eager() -> None:
    finals = []
    for compile_ in (False, True):
        config = TrainConfig(
            epochs=1, batch_size=32, lr=3e-3, device="cpu", compile=compile_, quiet=True
        )
        trainer = Trainer(mlp(), Images(), Images(30, 1), config)
        assert hasattr(trainer.train_model, "_orig_mod") == compile_  # really compiled
        result = trainer.fit()
        finals.append((trainer.model.state_dict(), result))
    (eager, r1), (compiled, r2) = finals
    assert r1.steps == r2.steps == 3
    for name in eager:
        torch.testing.assert_close(compiled[name], eager[name], rtol=1e-5, atol=1e-6, msg=name)
    assert r2.final_test_loss == pytest.approx(r1.final_test_loss, rel=1e-5)
