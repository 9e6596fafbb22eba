"""Training: AdamW groups and warmup-cosine schedule, the trainer, checkpoints, metrics.

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

from tfam.training.checkpoint import (
    CheckpointError,
    CheckpointWarning,
    load_latest,
    read_checkpoint,
    save_checkpoint,
)
from tfam.training.metrics import METRIC_COLUMNS, MetricsLogger, read_metrics_csv
from tfam.training.optim import (
    build_optimizer,
    build_scheduler,
    param_groups,
    split_decay,
    warmup_cosine_factor,
)
from tfam.training.trainer import TrainConfig, Trainer, TrainResult, preprocess_info, train

__all__ = [
    "METRIC_COLUMNS",
    "CheckpointError",
    "CheckpointWarning",
    "MetricsLogger",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "build_optimizer",
    "build_scheduler",
    "load_latest",
    "param_groups",
    "preprocess_info",
    "read_checkpoint",
    "read_metrics_csv",
    "save_checkpoint",
    "split_decay",
    "train",
    "warmup_cosine_factor",
]
