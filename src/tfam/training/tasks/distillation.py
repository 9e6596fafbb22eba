"""Distillation through a distillation token (Touvron et al. 2021, DeiT): the student's class
head learns the labels, its distillation head learns a teacher.

The student gives two logits, ``model(images, both=True) -> (Z_cls, Z_dist)`` (a DeiT with
``distilled=True``); the teacher, any image model ``teacher(images) -> Z_t (B, K)``, reads the
same augmented images, in eval mode and without gradients. Per image, with psi = softmax:

- hard (the paper's Eq. 3, its best):  L = (1 - a) CE(psi(Z_cls), y) + a CE(psi(Z_dist), y_t),
  y_t = argmax_c Z_t(c), a = 1/2 by default;
- soft (Eq. 2, Hinton et al.'s):  L = (1 - a) CE(psi(Z_cls), y)
                                       + a tau^2 KL(psi(Z_t / tau) || psi(Z_dist / tau)).

The class term takes ``label_smoothing`` (DeiT's recipe smooths the labels, not the teacher's),
and on a batch mixed by Mixup or CutMix it weighs the two labels by lam and 1 - lam, while the
teacher reads the mixed image and its term is unchanged (DeiT's: the teacher's argmax of the
mixed image is the distillation head's one label).
The sums are over images (the trainer divides by the global batch's images), so the KL is per
image, summed over classes, as the paper writes it (the DeiT repository divides it by B * K).
Evaluation and the metrics are image classification's: ``loss`` and ``acc`` of the prediction,
the average of the two heads (``model(images)``); the teacher is not run there.

``cache=True`` runs the teacher once per training image, before the first step, on the image
as stored (not augmented; :meth:`ImageDistillation.prepare_training`, with a progress bar), and
reuses those logits in every epoch (batches carry their dataset indices): the teacher then
costs one pass over the data instead of one per epoch, and a time budget, timed from the first
steps, plans from the student's steps alone. The price is the paper's exact rule (the teacher
reads the same augmented image) where the augmentation would change the teacher's answer. The
cache lives in memory: a resumed run fills it again, with the same logits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tfam.training.tasks.base import Batch, dominant_labels, mixed_cross_entropy, model_config
from tfam.training.tasks.image_classification import ImageClassification

__all__ = ["DISTILLATION_KINDS", "ImageDistillation", "distillation_loss"]

DISTILLATION_KINDS = ("hard", "soft")


def distillation_loss(
    cls_logits: Tensor,
    dist_logits: Tensor,
    teacher_logits: Tensor,
    labels: Tensor,
    *,
    kind: str = "hard",
    alpha: float = 0.5,
    tau: float = 1.0,
    label_smoothing: float = 0.0,
    mix_labels: Tensor | None = None,
    mix_lam: Tensor | None = None,
) -> Tensor:
    """The DeiT loss summed over the batch: logits (B, K) of the class head, the distillation
    head and the teacher, labels (B,) (and, on a mixed batch, the partner's labels and lam
    (B,)) -> a scalar (see the module docstring)."""
    # sum_i CE(Z_cls, y), or lam CE(Z_cls, y) + (1 - lam) CE(Z_cls, y') on a mixed batch
    base, _ = mixed_cross_entropy(cls_logits, labels, label_smoothing, mix_labels, mix_lam)
    if kind == "hard":
        teacher_labels = teacher_logits.argmax(dim=-1)  # y_t = argmax_c Z_t(c)
        teacher_term = F.cross_entropy(dist_logits, teacher_labels, reduction="sum")
    else:
        # tau^2 KL(psi(Z_t/tau) || psi(Z_s/tau)), summed over classes and images.
        teacher_term = (tau * tau) * F.kl_div(
            F.log_softmax(dist_logits / tau, dim=-1),
            F.log_softmax(teacher_logits / tau, dim=-1),
            reduction="sum",
            log_target=True,
        )
    return (1 - alpha) * base + alpha * teacher_term


class ImageDistillation(ImageClassification):
    """Image classification with a teacher, through the student's distillation token.

    Built with ``task_for("image-distillation", dataset, teacher=model, kind="hard", alpha=0.5,
    tau=1.0)``; without a teacher it says so. ``extra_models()`` gives the teacher to the
    trainer (placed on the run's device and precision, eval mode, frozen, never checkpointed).
    A student without a distillation token is refused in one line (it has no second head to
    distil into; train it with image-classification).
    """

    name = "image-distillation"
    objective = "distill"
    needs_teacher: ClassVar[bool] = True

    def __init__(
        self,
        teacher: nn.Module,
        kind: str = "hard",
        alpha: float = 0.5,
        tau: float = 1.0,
        cache: bool = False,
    ) -> None:
        if not isinstance(teacher, nn.Module):
            raise ValueError(
                f"teacher={type(teacher).__name__} is invalid for task 'image-distillation': "
                "expected an image model (a torch.nn.Module)"
            )
        if kind not in DISTILLATION_KINDS:
            raise ValueError(
                f"distillation={kind!r} is invalid: expected one of {', '.join(DISTILLATION_KINDS)}"
            )
        if not 0.0 <= float(alpha) <= 1.0:
            raise ValueError(f"distill_alpha={alpha!r} is invalid: expected a number in [0, 1]")
        if not float(tau) > 0.0:
            raise ValueError(f"distill_tau={tau!r} is invalid: expected a number > 0")
        if not isinstance(cache, bool):
            raise ValueError(f"teacher_cache={cache!r} is invalid: expected True or False")
        # The teacher only runs forward: its conv weights go to channels-last (NHWC) memory,
        # where oneDNN's and cuDNN's convolutions run faster (values unchanged; the caller's
        # module is converted in place). The student stays as it is: torch 2.13's CPU backward
        # of a strided 1x1 conv with channels-last weights crashes.
        self.teacher = teacher.eval().requires_grad_(False).to(memory_format=torch.channels_last)
        self.kind, self.alpha, self.tau = kind, float(alpha), float(tau)
        self.cache = cache
        # Per training dataset (by id): the teacher's logits (N, K) and which rows are filled.
        self._cached: dict[int, tuple[Tensor, Tensor]] = {}

    @classmethod
    def for_dataset(
        cls,
        dataset: Any,
        *,
        teacher: nn.Module | None = None,
        kind: str = "hard",
        alpha: float = 0.5,
        tau: float = 1.0,
        cache: bool = False,
    ) -> ImageDistillation:
        if teacher is None:
            raise ValueError(
                "task 'image-distillation' needs a teacher: task_for('image-distillation', "
                "dataset, teacher=model) (tfam train deit --teacher RUN_DIR)"
            )
        return cls(teacher, kind=kind, alpha=alpha, tau=tau, cache=cache)

    def extra_models(self) -> dict[str, nn.Module]:
        return {"teacher": self.teacher}

    def training_batch(self, model: nn.Module, batch: Batch) -> Batch:
        config = model_config(model)
        if not getattr(config, "distilled", False):
            family = getattr(config, "family", type(model).__name__)
            raise ValueError(
                f"task 'image-distillation' is invalid for this {family} model: it needs a "
                "distillation token and head (a DeiT with distilled=True); train it with "
                "image-classification, or use a distilled preset"
            )
        return batch

    def get_batch(self, dataset: Any, indices: Tensor) -> Batch | None:
        batch = super().get_batch(dataset, indices)
        if batch is None or not self.cache:
            return batch
        # Where each image sits in its dataset, for the cache (train_loss reads it).
        index = torch.as_tensor(indices, dtype=torch.int64)
        # Per row, so micro-batches and shards split them with the images.
        return {
            **batch,
            "index": index,
            "dataset": torch.full_like(index, id(dataset)),
            "dataset_size": torch.full_like(index, len(dataset)),
        }

    def prepare_training(
        self,
        dataset: Any,
        batches: Callable[[Sequence[Tensor]], Iterable[Batch]],
        prepare: Callable[[Batch], Batch],
        show_progress: bool,
        batch_size: int = 256,
    ) -> None:
        """With ``cache``: the teacher's logits of every image of ``dataset`` (as stored, not
        augmented), in batches of ``batch_size``, before training; the steps then read them.
        Without the cache, or for a dataset without indexed batches, nothing."""
        if not self.cache or not hasattr(dataset, "get_batch"):
            return
        from tqdm import tqdm

        size = len(dataset)
        chunks = list(torch.arange(size).split(batch_size))
        bar = tqdm(
            total=size, desc="teacher: reading the training images once", unit="img",
            disable=not show_progress, leave=False, dynamic_ncols=True,
        )  # fmt: skip
        with bar:
            for batch in batches(chunks):
                self.cached_teacher_logits(prepare(batch), size)
                bar.update(int(batch["index"].numel()))

    def cached_teacher_logits(self, batch: Batch, size: int) -> Tensor:
        """The teacher's logits (B, K) of ``batch``: from the cache where filled, else computed
        on these (augmented) images and stored. ``size``: the dataset's length."""
        images, index = batch["images"], batch["index"]
        key = int(batch["dataset"][0])
        if key not in self._cached:
            fresh = self.teacher_logits(images)
            table = torch.zeros(size, fresh.shape[-1], device=fresh.device)
            filled = torch.zeros(size, dtype=torch.bool, device=fresh.device)
            self._cached[key] = (table, filled)
            table[index], filled[index] = fresh, True
            return fresh
        table, filled = self._cached[key]
        index = index.to(table.device)
        missing = ~filled[index]
        if bool(missing.any()):
            table[index[missing]] = self.teacher_logits(images[missing.to(images.device)])
            filled[index[missing]] = True
        return table[index]

    def teacher_logits(self, images: Tensor) -> Tensor:
        """The teacher's float32 logits (B, K) for the (augmented) images, eval mode, no grad."""
        if self.teacher.training:
            self.teacher.eval()
        with torch.no_grad():
            return self.teacher(images).float()

    def train_loss(
        self, model: nn.Module, batch: Batch, config: Any
    ) -> tuple[Tensor, dict[str, Tensor]]:
        batch = self.training_batch(model, batch)
        images, labels = batch["images"], batch["labels"]
        if self.cache and "mix_lam" in batch:
            raise ValueError(
                "teacher_cache=True is invalid with Mixup or CutMix: the cache holds the "
                "teacher's logits of the stored images, and a mixed image is none of them (run "
                "the teacher on every view: drop --teacher-cache)"
            )
        cls_logits, dist_logits = (z.float() for z in model(images, both=True))
        if self.cache and "index" in batch:
            teacher = self.cached_teacher_logits(batch, int(batch["dataset_size"][0]))
        else:
            teacher = self.teacher_logits(images)
        if teacher.shape != cls_logits.shape:
            raise ValueError(
                f"the teacher gives logits of shape {tuple(teacher.shape)}, the student "
                f"{tuple(cls_logits.shape)}: teacher and student must have the same classes"
            )
        loss = distillation_loss(
            cls_logits,
            dist_logits,
            teacher,
            labels,
            kind=self.kind,
            alpha=self.alpha,
            tau=self.tau,
            label_smoothing=float(getattr(config, "label_smoothing", 0.0)),
            mix_labels=batch.get("mix_labels"),
            mix_lam=batch.get("mix_lam"),
        )
        with torch.no_grad():
            prediction = (cls_logits + dist_logits) / 2  # what evaluation scores
            plain = mixed_cross_entropy(
                prediction, labels, 0.0, batch.get("mix_labels"), batch.get("mix_lam")
            )[1]
            sums = self.sums(prediction, dominant_labels(batch), plain)
        return loss, sums
