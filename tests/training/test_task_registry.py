"""Tasks are a registry: a subclass of BaseTask that sets ``name`` is a task (``TASKS``,
``task_for``) with no other change, and a task may bring extra models (a distillation teacher)
that the trainer puts on the run's device and precision, in eval mode, frozen, outside DDP and
outside the checkpoints. The toy task here is defined and registered by this test file."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tfam.training import TASKS, ImageClassification, TrainConfig, Trainer, read_checkpoint
from tfam.training.tasks import BaseTask, CrossEntropyTask, Task, TokenTask, task_for

BUILT_IN = {
    "image-classification",
    "sequence-classification",
    "token-classification",
    "causal-lm",
    "masked-lm",
    "seq2seq",
}


pytestmark = pytest.mark.usefixtures("one_thread")


class Images(torch.utils.data.Dataset):
    """Random 1x4x4 images whose class is the sign of their mean (2 classes)."""

    def __init__(self, n: int = 48, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 1, 4, 4, generator=g)
        self.y = (self.x.mean(dim=(1, 2, 3)) > 0).long()

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[Tensor, int]:
        return self.x[i], int(self.y[i])


def student() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 2))


class Teacher(nn.Module):
    """A fixed classifier that counts its forwards (and the mode it ran in)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 2)
        self.dropout = nn.Dropout(0.5)  # in train mode it would make the targets random
        self.calls = 0
        self.modes: set[bool] = set()

    def forward(self, x: Tensor) -> Tensor:
        self.calls += 1
        self.modes.add(self.training)
        return self.linear(self.dropout(x.flatten(1)))


@pytest.fixture
def distill() -> Iterator[type[ImageClassification]]:
    """A distillation task, registered for the test and removed after it."""

    class Distill(ImageClassification):
        name = "toy-distill"

        def __init__(self, teacher: nn.Module | None = None, weight: float = 0.5) -> None:
            self.teacher = teacher if teacher is not None else Teacher()
            self.weight = weight

        def extra_models(self) -> dict[str, nn.Module]:
            return {"teacher": self.teacher}

        def train_loss(
            self, model: nn.Module, batch: dict[str, Tensor], config: object
        ) -> tuple[Tensor, dict[str, Tensor]]:
            loss, sums = super().train_loss(model, batch, config)
            with torch.no_grad():
                target = self.teacher(batch["images"]).float().log_softmax(dim=-1)
            student_log = model(batch["images"]).float().log_softmax(dim=-1)
            kl = F.kl_div(student_log, target, log_target=True, reduction="sum")
            return loss + self.weight * kl, sums

    yield Distill
    del TASKS["toy-distill"]


def test_built_in_tasks_are_registered_by_name() -> None:
    assert set(TASKS) >= BUILT_IN
    for name in BUILT_IN:
        assert TASKS[name].name == name and issubclass(TASKS[name], BaseTask)
    # The token tasks share one base: loss, sums, reduce and predict are written once; image
    # classification shares its cross-entropy part.
    token = {"sequence-classification", "token-classification", "causal-lm", "masked-lm"}
    for name in token | {"seq2seq"}:
        assert issubclass(TASKS[name], TokenTask)
        assert "train_loss" not in vars(TASKS[name]), name
    for name in token | {"image-classification"}:
        assert issubclass(TASKS[name], CrossEntropyTask)
        assert not {"train_loss", "eval_sums", "sums"} & set(vars(TASKS[name])), name


def test_an_unknown_task_is_one_line_listing_the_names() -> None:
    with pytest.raises(ValueError, match="task='nope' is invalid: expected one of") as err:
        task_for("nope")
    assert "\n" not in str(err.value) and "image-classification" in str(err.value)


def test_a_subclass_registers_itself(distill: type[ImageClassification]) -> None:
    assert TASKS["toy-distill"] is distill
    task = task_for("toy-distill", Images())
    assert isinstance(task, distill) and isinstance(task, Task)
    with pytest.raises(ValueError, match="toy-distill"):
        task_for("toy-distil")  # the list of valid names includes the new one


def test_extra_models_are_placed_frozen_and_not_saved(
    distill: type[ImageClassification], tmp_path
) -> None:
    teacher = Teacher().to(torch.float64)  # another precision than the run's
    teacher.train()
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    task = distill(teacher)
    config = TrainConfig(epochs=2, batch_size=16, lr=1e-2, warmup_epochs=0, seed=0)
    trainer = Trainer(student(), Images(), Images(16, seed=1), config, tmp_path, task=task)

    assert trainer.extra_models == {"teacher": teacher}
    param = next(trainer.model.parameters())
    assert all(p.dtype == param.dtype and p.device == param.device for p in teacher.parameters())
    assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())
    # Not wrapped (DDP/FSDP wrap the trained model only) and not trained.
    assert trainer.train_model is trainer.model
    trained = {id(p) for g in trainer.optimizer.param_groups for p in g["params"]}
    assert not trained & {id(p) for p in teacher.parameters()}

    result = trainer.fit()
    assert teacher.calls == result.steps == 6 and teacher.modes == {False}
    for k, v in teacher.state_dict().items():
        assert torch.equal(v, before[k].to(v.dtype)), k
    state = read_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert set(state["model"]) == set(trainer.model.state_dict())
    assert not any("linear" in k for k in state["model"])


def test_the_teacher_changes_the_training(distill: type[ImageClassification]) -> None:
    """The extra model is really used: the same run with and without the teacher's term ends
    with other weights."""
    config = TrainConfig(epochs=1, batch_size=16, lr=1e-2, warmup_epochs=0, seed=0)
    weights = []
    for weight in (0.0, 1.0):
        torch.manual_seed(1)
        task = distill(Teacher(), weight=weight)
        trainer = Trainer(student(), Images(), None, config, task=task)
        trainer.fit()
        weights.append(torch.cat([p.detach().flatten() for p in trainer.model.parameters()]))
    assert not torch.equal(weights[0], weights[1])


def test_a_task_without_extra_models_trains_as_before() -> None:
    """A task that is only the protocol (no BaseTask, no extra_models) still trains."""

    class Plain:
        name = "plain"
        metrics = ("loss", "acc")
        primary_metric = "acc"
        higher_is_better = True
        unit = "images"
        _inner = ImageClassification()

        def __getattr__(self, name: str) -> object:
            if name == "extra_models":
                raise AttributeError(name)
            return getattr(self._inner, name)

    trainer = Trainer(student(), Images(), None, TrainConfig(epochs=1, batch_size=16), task=Plain())
    assert trainer.extra_models == {}
    assert trainer.fit().steps == 3
    assert "plain" not in TASKS
