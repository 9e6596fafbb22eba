"""``TrainConfig``: the settings of a training run, checked when made. The command line builds
``tfam train``'s options from the fields' help; the trainer (:mod:`tfam.training.trainer`)
reads them."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from tfam.training.batching import EVAL_BATCH_TOKENS
from tfam.training.devices import PRECISIONS
from tfam.training.ema import check_decay
from tfam.training.optim import SCHEDULES

__all__ = ["MAX_SEED", "RESUME_FIELDS", "TrainConfig"]

MAX_SEED = 2**63 - 1

# Settings that change the arithmetic of a run: resuming with other values would not continue
# the same run, so it is refused. The others (logging, saving, stopping early, the device) may
# change; ``epochs`` may change too, which re-plans the schedule (see the module docstring).
RESUME_FIELDS = (
    "batch_size",
    "lr",
    "min_lr",
    "weight_decay",
    "betas",
    "eps",
    "warmup_epochs",
    "warmup_steps",
    "schedule",
    "batch_tokens",
    "label_smoothing",
    "clip_grad",
    "accum_steps",
    "precision",
    "seed",
    "refit",
    "ema",
)


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass
class TrainConfig:
    """Settings of a training run; each field's ``metadata["help"]`` says what it does (the
    command line builds its options from them). Batches: see the module docstring."""

    epochs: int = field(default=10, metadata=_help("epochs over the training split"))
    batch_size: int = field(
        default=128, metadata=_help("examples per optimiser step, over all processes")
    )
    lr: float = field(default=1e-3, metadata=_help("peak learning rate, reached after warmup"))
    min_lr: float = field(
        default=1e-5,
        metadata=_help("<= lr: the last step's lr (cosine), the floor of the decay (inverse_sqrt)"),
    )
    weight_decay: float = field(default=0.05, metadata=_help("AdamW weight decay (matrices only)"))
    betas: tuple[float, float] = field(
        default=(0.9, 0.999), metadata=_help("AdamW betas, two floats in [0, 1)")
    )
    eps: float = field(default=1e-8, metadata=_help("AdamW epsilon"))
    warmup_epochs: float = field(
        default=1.0, metadata=_help("linear warmup length in epochs (fractions allowed)")
    )
    warmup_steps: int | None = field(
        default=None,
        metadata=_help("linear warmup length in optimiser steps; wins over warmup_epochs when set"),
    )
    schedule: str = field(
        default="cosine",
        metadata=_help(
            "learning-rate decay after warmup: cosine (to min_lr) or inverse_sqrt (the "
            "Transformer paper's lr * sqrt(warmup / step))"
        ),
    )
    batch_tokens: int | None = field(
        default=None,
        metadata=_help(
            "batches by token count: examples x longest length <= N, bucketed by length (the "
            "dataset needs lengths); none: batch_size examples"
        ),
    )
    label_smoothing: float = field(
        default=0.0, metadata=_help("label smoothing of the training loss, in [0, 0.999]")
    )
    clip_grad: float | None = field(
        default=1.0, metadata=_help("max global gradient norm; 0 or none disables clipping")
    )
    accum_steps: int = field(
        default=1, metadata=_help("micro-batches per optimiser step (same result, less memory)")
    )
    bf16: bool = field(
        default=False, metadata=_help("bfloat16 autocast (the same as precision='bf16')")
    )
    seed: int = field(
        default=0,
        metadata=_help(
            "seed of data order, augmentation and dropout (tfam train: also of the initial "
            "weights), in [0, 2**63); the train/val/test splits stay fixed, so seeds compare "
            "on the same held-out data (except karate's 4 labelled members: 0, 33 and one more "
            "of each faction, drawn by the seed)"
        ),
    )
    save_every: int = field(
        default=0, metadata=_help("also checkpoint every N optimiser steps (0: epoch ends only)")
    )
    eval_batch_size: int = field(default=1000, metadata=_help("examples per evaluation batch"))
    eval_batch_tokens: int = field(
        default=EVAL_BATCH_TOKENS,
        metadata=_help(
            "text data: also at most N padded tokens (examples x longest length) per "
            "evaluation batch, examples sorted by length, so evaluation memory follows tokens"
        ),
    )
    max_steps: int | None = field(
        default=None,
        metadata=_help(
            "stop after N optimiser steps in all (smoke runs); with refit, of the selection run"
        ),
    )
    max_minutes: float | None = field(
        default=None,
        metadata=_help(
            "a budget of N minutes of training in all (over resumes), final evaluation "
            "included: the first steps are timed, the schedule (warmup, decay) is fitted to the "
            "steps that fit, and the final evaluation is sized to the time left (with refit: "
            "only a stop after N minutes of selection, then the refit trains as many epochs)"
        ),
    )
    quiet: bool = field(default=False, metadata=_help("no per-epoch lines and no progress bar"))
    progress: bool | None = field(
        default=None, metadata=_help("progress bar; none: only when stderr is a terminal")
    )
    tensorboard: bool = field(
        default=True, metadata=_help("also log to OUT/tensorboard when tensorboard is installed")
    )
    precision: str = field(
        default="fp32",
        metadata=_help("fp32, bf16 (autocast) or fp16 (autocast with a gradient scaler)"),
    )
    device: str = field(
        default="auto", metadata=_help("auto (CUDA when present), cpu, cuda, cuda:N or mps")
    )
    compile: bool = field(
        default=False,
        metadata=_help("torch.compile the model (same results within float tolerance)"),
    )
    fsdp: bool = field(
        default=False,
        metadata=_help("shard parameters with FSDP instead of DDP (under torchrun)"),
    )
    dist_timeout: float = field(
        default=600.0,
        metadata=_help("seconds a process waits on the others before the job fails"),
    )
    num_workers: int | None = field(
        default=None,
        metadata=_help(
            "DataLoader worker processes for datasets decoded per item; none: automatic"
        ),
    )
    patience: int | None = field(
        default=None,
        metadata=_help("stop after N epochs without a better validation score (needs a val split)"),
    )
    refit: bool = field(
        default=False,
        metadata=_help(
            "after training with validation, train a fresh model on train + validation for the "
            "same number of epochs and report its test score; the saved model is the refit one"
        ),
    )
    init: str | None = field(
        default=None,
        metadata=_help("start from trained weights: a run directory or a model preset name"),
    )
    ema: float | None = field(
        default=None,
        metadata=_help(
            "keep an exponential moving average of the weights with this decay, in (0, 1) "
            "(e.g. 0.999; warmed up as min(d, (1 + n) / (10 + n))); validation, the best epoch, "
            "the test score and the saved model use the average; none: the weights themselves"
        ),
    )

    def __post_init__(self) -> None:
        def positive_int(name: str, allow_zero: bool = False, hi: int | None = None) -> None:
            v = getattr(self, name)
            if (
                isinstance(v, bool)
                or not isinstance(v, int)
                or v < 0
                or (v == 0 and not allow_zero)
                or (hi is not None and v > hi)
            ):
                lo = 0 if allow_zero else 1
                need = f"an int >= {lo}" if hi is None else f"an int in [{lo}, 2**63 - 1]"
                raise ValueError(f"{name}={v!r} is invalid: expected {need}")

        def number(name: str, lo: float, hi: float = math.inf, lo_open: bool = False) -> None:
            v = getattr(self, name)
            ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            ok = ok and (v > lo if lo_open else v >= lo) and v <= hi
            if not ok:
                bracket = "(" if lo_open else "["
                raise ValueError(
                    f"{name}={v!r} is invalid: expected a number in {bracket}{lo}, {hi}]"
                )

        for name in ("epochs", "batch_size", "accum_steps", "eval_batch_size"):
            positive_int(name)
        positive_int("save_every", allow_zero=True)
        # torch and NumPy refuse seeds outside [0, 2**64) and the trainer derives per-rank and
        # per-stream seeds above the given one.
        positive_int("seed", allow_zero=True, hi=MAX_SEED)
        if self.max_steps is not None:
            positive_int("max_steps")
        if self.max_minutes is not None:
            number("max_minutes", 0.0, lo_open=True)
        if self.warmup_steps is not None:
            positive_int("warmup_steps", allow_zero=True)
        if self.batch_tokens is not None:
            positive_int("batch_tokens")
        positive_int("eval_batch_tokens")
        if self.num_workers is not None:
            positive_int("num_workers", allow_zero=True)
        if self.patience is not None:
            positive_int("patience")
        number("lr", 0.0, lo_open=True)
        number("min_lr", 0.0, self.lr)
        number("weight_decay", 0.0)
        number("eps", 0.0, lo_open=True)
        number("warmup_epochs", 0.0, float(self.epochs))
        number("label_smoothing", 0.0, 0.999)
        number("dist_timeout", 0.0, lo_open=True)
        if self.clip_grad is not None:
            number("clip_grad", 0.0)
        if self.accum_steps > self.batch_size:
            raise ValueError(
                f"accum_steps={self.accum_steps} is invalid: a batch of batch_size="
                f"{self.batch_size} images cannot be cut into more micro-batches than images"
            )
        betas = tuple(self.betas)
        if len(betas) != 2 or not all(isinstance(b, int | float) and 0 <= b < 1 for b in betas):
            raise ValueError(f"betas={self.betas!r} is invalid: expected two floats in [0, 1)")
        self.betas = (float(betas[0]), float(betas[1]))
        if self.schedule not in SCHEDULES:
            raise ValueError(
                f"schedule={self.schedule!r} is invalid: expected one of {', '.join(SCHEDULES)}"
            )
        if self.precision not in PRECISIONS:
            raise ValueError(
                f"precision={self.precision!r} is invalid: expected one of {', '.join(PRECISIONS)}"
            )
        # bf16 is the older spelling of precision="bf16"; the two are kept in agreement.
        if self.bf16 and self.precision == "fp32":
            self.precision = "bf16"
        elif self.bf16 and self.precision != "bf16":
            raise ValueError(
                f"bf16=True is invalid with precision={self.precision!r}: bf16=True means "
                "precision='bf16'; give one of them"
            )
        self.bf16 = self.precision == "bf16"
        if not isinstance(self.device, str) or not self.device.strip():
            raise ValueError(
                f"device={self.device!r} is invalid: expected auto, cpu, cuda, cuda:N or mps"
            )
        if self.init is not None and (not isinstance(self.init, str) or not self.init.strip()):
            raise ValueError(
                f"init={self.init!r} is invalid: expected a run directory or a model preset name"
            )
        if self.ema is not None:
            check_decay(self.ema)
        if not isinstance(self.refit, bool):
            raise ValueError(f"refit={self.refit!r} is invalid: expected True or False")

    def check_splits(self, has_val: bool) -> None:
        """Refuse settings that need a validation split when there is none."""
        if self.patience is not None and not has_val:
            raise ValueError(
                f"patience={self.patience} is invalid without a validation split: early "
                "stopping on the test split would make the test result optimistic; pass val_set"
            )
        if self.refit and not has_val:
            raise ValueError(
                "refit=True is invalid without a validation split: the refit trains on fit + "
                "val once validation has chosen the run; pass val_set (or refit=False)"
            )

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["betas"] = list(self.betas)
        return d
