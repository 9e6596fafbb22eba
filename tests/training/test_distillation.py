"""DeiT's distillation task: the hard and soft losses against a hand computation, the teacher
(a tiny ViT run trained for a few steps) seen in eval mode on the student's images, and
`tfam train deit --teacher RUN` end to end (train_args.json, --resume, one-line errors)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

import tfam
import tfam.cli
from tfam.training import TrainConfig
from tfam.training.checkpoint import read_checkpoint
from tfam.training.tasks import ImageDistillation, task_for

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = ["--set", "dim=16", "--set", "depth=1", "--set", "heads=2"]
STEPS = ["--epochs", "1", "--max-steps", "2", "--batch-size", "32", "--quiet"]


def tfam_main(*argv: object) -> int:
    return tfam.cli.main([str(a) for a in argv])


@pytest.fixture(scope="module")
def teacher_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny ViT trained on digits for two steps: the teacher."""
    out = tmp_path_factory.mktemp("teacher") / "vit"
    assert tfam_main("train", "vit", "--data", "digits", *TINY, *STEPS, "--out", out) == 0
    return out


def student() -> tfam.models.DeiT:
    torch.manual_seed(0)
    return tfam.create_model("deit_digits", dim=16, depth=1, heads=2).train()


def hand_loss(cls, dist, teacher, labels, kind, alpha, tau, smoothing):  # noqa: ANN001, ANN201
    """The DeiT loss written out in float64: sums over images."""
    cls, dist, teacher = cls.double(), dist.double(), teacher.double()
    logp = cls.log_softmax(-1)
    nll = -logp.gather(1, labels[:, None])[:, 0]
    base = ((1 - smoothing) * nll + smoothing * (-logp).mean(-1)).sum()
    if kind == "hard":
        y_t = teacher.argmax(-1)
        term = -dist.log_softmax(-1).gather(1, y_t[:, None]).sum()
    else:
        p_t = (teacher / tau).softmax(-1)
        term = tau**2 * (p_t * (p_t.log() - (dist / tau).log_softmax(-1))).sum()
    return (1 - alpha) * base + alpha * term


@pytest.mark.parametrize("kind,alpha,tau", [("hard", 0.5, 1.0), ("soft", 0.5, 1.0),
                                            ("soft", 0.3, 3.0)])  # fmt: skip
def test_losses_equal_a_hand_computation(teacher_run: Path, kind: str, alpha, tau) -> None:  # noqa: ANN001
    teacher = tfam.from_pretrained(teacher_run)
    model = student()
    task = task_for("image-distillation", None, teacher=teacher, kind=kind, alpha=alpha, tau=tau)
    g = torch.Generator().manual_seed(0)
    batch = {"images": torch.randn(6, 1, 8, 8, generator=g), "labels": torch.arange(6) % 10}
    config = TrainConfig(label_smoothing=0.1)
    loss, sums = task.train_loss(model, batch, config)
    with torch.no_grad():
        cls, dist = model(batch["images"], both=True)
        t = teacher.eval()(batch["images"])
    expected = hand_loss(cls, dist, t, batch["labels"], kind, alpha, tau, 0.1)
    torch.testing.assert_close(loss.double(), expected, rtol=1e-5, atol=1e-6)
    # The metrics are the prediction's (the heads' average), as evaluation scores it.
    right = ((cls + dist) / 2).argmax(-1) == batch["labels"]
    assert sums["correct"] == right.sum() and sums["count"] == 6
    loss.backward()
    assert model.head_dist.weight.grad is not None and model.head.weight.grad is not None
    assert all(p.grad is None for p in teacher.parameters())


def test_on_a_mixed_batch_the_class_head_weighs_both_labels_and_the_teacher_reads_the_mix(
    teacher_run: Path,
) -> None:
    """Mixup/CutMix with a teacher (DeiT's recipe): the class term is lam CE(y) + (1 - lam)
    CE(y'), the distillation term the teacher's argmax of the mixed image; the cache refuses."""
    from tfam.data.vision.augment import BatchAugment

    teacher = tfam.from_pretrained(teacher_run)
    model = student()
    task = ImageDistillation(teacher)
    g = torch.Generator().manual_seed(0)
    raw = {"images": torch.randn(6, 1, 8, 8, generator=g), "labels": torch.arange(6) % 10}
    batch = task.augment(raw, BatchAugment(mixup=0.8), torch.Generator().manual_seed(1), None)
    lam = batch["mix_lam"].double()
    loss, sums = task.train_loss(model, batch, TrainConfig())
    with torch.no_grad():
        cls, dist = model(batch["images"], both=True)
        t = teacher.eval()(batch["images"])
    own = hand_loss(cls, dist, t, raw["labels"], "hard", 0.0, 1.0, 0.0)  # alpha 0: CE(y) only
    logp = cls.double().log_softmax(-1)
    per_own = -logp.gather(1, raw["labels"][:, None])[:, 0]
    per_other = -logp.gather(1, raw["labels"].flip(0)[:, None])[:, 0]
    assert torch.allclose(own, per_own.sum())
    base = (lam * per_own + (1 - lam) * per_other).sum()
    term = -dist.double().log_softmax(-1).gather(1, t.argmax(-1)[:, None]).sum()
    torch.testing.assert_close(loss.double(), 0.5 * base + 0.5 * term, rtol=1e-5, atol=1e-6)
    dominant = torch.where(lam >= 0.5, raw["labels"], raw["labels"].flip(0))
    assert sums["correct"] == (((cls + dist) / 2).argmax(-1) == dominant).sum()
    cached = ImageDistillation(teacher, cache=True)
    with pytest.raises(ValueError, match="teacher_cache=True is invalid with Mixup or CutMix"):
        cached.train_loss(model, {**batch, "index": torch.arange(6)}, TrainConfig())


def test_the_teacher_reads_the_students_images_in_eval_mode_without_grad() -> None:
    seen: list[tuple[torch.Tensor, bool, bool]] = []

    class Spy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(64, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append((x, self.training, torch.is_grad_enabled()))
            return self.proj(x.flatten(1))

    spy = Spy().train()
    task = ImageDistillation(spy)
    assert task.extra_models() == {"teacher": spy}
    images = torch.randn(4, 1, 8, 8)
    task.train_loss(student(), {"images": images, "labels": torch.zeros(4, dtype=torch.long)},
                    TrainConfig())  # fmt: skip
    [(x, training, grad)] = seen
    assert x is images and not training and not grad


def test_a_conv_teacher_runs_channels_last_with_the_same_logits() -> None:
    torch.manual_seed(0)
    cnn = tfam.create_model("resnet_digits").eval()
    contiguous = copy.deepcopy(cnn)
    task = ImageDistillation(cnn)
    convs = [m.weight for m in cnn.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convs and all(
        w.is_contiguous(memory_format=torch.channels_last) for w in convs if w.shape[1] > 1
    )
    images = torch.randn(16, 1, 8, 8)
    with torch.no_grad():
        expected = contiguous(images)
    torch.testing.assert_close(task.teacher_logits(images), expected, rtol=1e-5, atol=1e-5)


def test_a_student_without_distillation_token_is_refused_in_one_line() -> None:
    task = ImageDistillation(torch.nn.Linear(64, 10))
    model = tfam.create_model("deit_digits", dim=16, depth=1, heads=2, distilled=False)
    batch = {"images": torch.randn(2, 1, 8, 8), "labels": torch.zeros(2, dtype=torch.long)}
    with pytest.raises(ValueError, match="needs a distillation token") as err:
        task.train_loss(model, batch, TrainConfig())
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="needs a teacher"):
        task_for("image-distillation", None)


def test_tfam_train_deit_with_a_teacher_completes_and_resumes(
    teacher_run: Path, tmp_path: Path
) -> None:
    out = tmp_path / "deit"
    args = ["train", "deit", "--data", "digits", *TINY, "--out", out]
    assert tfam_main(*args, "--teacher", teacher_run, "--distillation", "soft",
                     "--distill-tau", "2", *STEPS) == 0  # fmt: skip
    saved = json.loads((out / "train_args.json").read_text())
    assert saved["task"] == "image-distillation"
    assert saved["teacher"] == str(teacher_run.resolve())
    assert (saved["distillation"], saved["distill_tau"]) == ("soft", 2.0)
    # The teacher's weights are not the run's: the checkpoint holds the student alone.
    state = read_checkpoint(out / "checkpoints" / "last.pt")
    assert set(state["model"]) == set(tfam.from_pretrained(out).state_dict())
    # --resume takes the teacher and the loss from train_args.json.
    assert tfam_main("train", "deit", "--data", "digits", "--out", out, "--resume",
                     "--max-steps", "3", "--quiet") == 0  # fmt: skip
    assert json.loads((out / "results.json").read_text())["saved"]["step"] in (2, 3)


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--teacher", "gpt2"], "--teacher 'gpt2' is invalid: it is a 'gpt' model"),
        (["--teacher", "vit_fashion_mnist"], "--teacher 'vit_fashion_mnist' is invalid for "
                                             "--data digits: it has image_size"),
        (["--distillation", "soft"], "--distillation needs --teacher"),
        (["--teacher", "TEACHER", "--set", "distilled=false"], "has no distillation token"),
        (["--teacher", "TEACHER", "--distill-alpha", "2"], "--distill-alpha 2.0 is invalid"),
        (["--teacher", "TEACHER", "--teacher-cache", "--cutmix", "1"],
         "--teacher-cache is invalid with --cutmix"),
    ],
)  # fmt: skip
def test_bad_teachers_are_one_line(
    teacher_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture, extra: list, message: str
) -> None:
    extra = [str(teacher_run) if a == "TEACHER" else a for a in extra]
    code = tfam_main("train", "deit", "--data", "digits", *TINY, *STEPS, "--out",
                     tmp_path / "x", *extra)  # fmt: skip
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and message in lines[0], err


class _Images(torch.utils.data.Dataset):
    """Eight 8x8 images with a get_batch fast path, as tfam's image datasets have."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(8, 1, 8, 8, generator=g)
        self.y = torch.arange(8) % 10

    def __len__(self) -> int:
        return 8

    def get_batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[indices], self.y[indices]


class _CountingTeacher(torch.nn.Module):
    """A linear teacher that counts the images it reads."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.linear = torch.nn.Linear(64, 10)
        self.images = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.images += x.shape[0]
        return self.linear(x.flatten(1))


def test_teacher_cache_reads_each_stored_image_once_before_training() -> None:
    data, teacher = _Images(), _CountingTeacher()
    task = ImageDistillation(teacher, cache=True)
    model, config = student(), TrainConfig()
    chunks = []

    def batches(index_batches):  # noqa: ANN001, ANN202
        chunks.extend(index_batches)
        return (task.get_batch(data, idx) for idx in index_batches)

    task.prepare_training(data, batches, lambda b: b, show_progress=False, batch_size=3)
    assert [c.tolist() for c in chunks] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert teacher.images == 8
    with torch.no_grad():
        stored = teacher.linear(data.x.flatten(1))  # the images as stored, not augmented
    for epoch in range(3):
        for idx in (torch.tensor([0, 3, 5]), torch.tensor([1, 2, 4, 6, 7])):
            batch = task.get_batch(data, idx)
            assert batch["index"].tolist() == idx.tolist()
            # Another view each epoch (an augmentation): the cache keeps the stored image's.
            batch["images"] = batch["images"] + epoch + 1
            got = task.cached_teacher_logits(batch, len(data))
            torch.testing.assert_close(got, stored[idx])
            task.train_loss(model, batch, config)[0].backward()
    assert teacher.images == 8, "one teacher pass over the data, not one per epoch"
    # A second call (a resumed run in the same process) reads nothing again.
    task.prepare_training(data, batches, lambda b: b, show_progress=False)
    assert teacher.images == 8


def test_the_trainer_fills_the_teacher_cache_before_its_first_step() -> None:
    from tfam.training import Trainer

    data, teacher = _Images(), _CountingTeacher()
    task = ImageDistillation(teacher, cache=True)
    model, seen = student(), []
    # What the teacher had read each time the student trained on a batch.
    model.register_forward_pre_hook(
        lambda m, args: seen.append(teacher.images) if m.training else None
    )
    config = TrainConfig(epochs=2, batch_size=4, lr=1e-3, seed=0)
    Trainer(model, data, config=config, task=task).fit()
    assert teacher.images == 8 and seen and set(seen) == {8}


def test_without_the_cache_the_teacher_reads_every_batch() -> None:
    data = _Images()
    model, config = student(), TrainConfig()
    teacher = _CountingTeacher()
    # Without the cache the teacher reads every batch of every epoch.
    plain = ImageDistillation(_CountingTeacher())
    for _ in range(2):
        plain.train_loss(model, plain.get_batch(data, torch.arange(8)), config)
    assert plain.teacher.images == 16
    with pytest.raises(ValueError, match="teacher_cache='yes' is invalid"):
        ImageDistillation(teacher, cache="yes")
