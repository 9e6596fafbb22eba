"""Training: tasks, the trainer (any device, torchrun/DDP), AdamW groups and the
warmup-cosine and inverse-square-root schedules, token batches, checkpoints, metrics, callbacks.

import torch, tfam
from tfam.data import load_dataset, default_augment
from tfam.training import Trainer, TrainConfig

torch.manual_seed(0)
model = tfam.create_model("vit_digits")
trainer = Trainer(
    model,
    load_dataset("digits", "train"),
    load_dataset("digits", "test"),
    TrainConfig(epochs=100, batch_size=128, lr=2e-3),
    out_dir="runs/digits",
    augment=default_augment("digits"),
)
result = trainer.fit()          # fit(resume=True) continues a killed run exactly
"""

from tfam.training.callbacks import Callback, CurvesCallback
from tfam.training.checkpoint import (
    CheckpointError,
    CheckpointWarning,
    load_latest,
    read_checkpoint,
    save_checkpoint,
)
from tfam.training.config import TrainConfig
from tfam.training.devices import available_devices, resolve_device
from tfam.training.distributed import DistInfo, dist_info, launch, launch_command
from tfam.training.errors import CheckpointSaveError, NonFiniteLossError, TrainingError
from tfam.training.init_weights import load_init_weights
from tfam.training.metrics import METRIC_COLUMNS, MetricsLogger, read_metrics_csv
from tfam.training.optim import (
    build_optimizer,
    build_scheduler,
    inverse_sqrt_factor,
    param_groups,
    split_decay,
    warmup_cosine_factor,
)
from tfam.training.refit import JoinedSplits, RefitPlan, join_splits
from tfam.training.results import TrainResult, preprocess_info
from tfam.training.runlock import RunLock, RunLockedError
from tfam.training.tasks import (
    TASKS,
    BaseTask,
    CausalLM,
    CrossEntropyTask,
    ImageClassification,
    MaskedLM,
    Seq2Seq,
    SequenceClassification,
    Task,
    TokenClassification,
    TokenTask,
    mask_tokens,
    task_for,
)
from tfam.training.trainer import Trainer, train

__all__ = [
    "METRIC_COLUMNS",
    "BaseTask",
    "Callback",
    "CausalLM",
    "CheckpointError",
    "CheckpointSaveError",
    "CheckpointWarning",
    "CrossEntropyTask",
    "CurvesCallback",
    "DistInfo",
    "ImageClassification",
    "JoinedSplits",
    "MaskedLM",
    "MetricsLogger",
    "NonFiniteLossError",
    "RefitPlan",
    "RunLock",
    "RunLockedError",
    "Seq2Seq",
    "SequenceClassification",
    "TASKS",
    "Task",
    "TokenClassification",
    "TokenTask",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "TrainingError",
    "available_devices",
    "build_optimizer",
    "build_scheduler",
    "dist_info",
    "inverse_sqrt_factor",
    "join_splits",
    "launch",
    "launch_command",
    "load_init_weights",
    "load_latest",
    "mask_tokens",
    "param_groups",
    "preprocess_info",
    "resolve_device",
    "read_checkpoint",
    "read_metrics_csv",
    "save_checkpoint",
    "split_decay",
    "task_for",
    "train",
    "warmup_cosine_factor",
]
