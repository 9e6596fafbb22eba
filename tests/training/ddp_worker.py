"""A tiny training run for the multi-process tests: run it with ``python ddp_worker.py ...``
(one process) or under ``python -m torch.distributed.run --nproc_per_node 2 ddp_worker.py ...``.

Every write a process attempts under --out is recorded and, at exit, listed in
``REPORT/writes-RANK.json``, so a test can check that only rank 0 writes the run directory.
"""

from __future__ import annotations

import argparse
import atexit
import builtins
import json
import os
import sys
from pathlib import Path

import torch

import tfam
from tfam.training import TrainConfig, Trainer


class Synthetic:
    """256 seeded 1x8x8 images in 10 classes, held in memory (the get_batch fast path)."""

    def __init__(self, n: int = 256, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.images = torch.randn(n, 1, 8, 8, generator=g)
        self.labels = torch.randint(0, 10, (n,), generator=g)
        self.images += self.labels.view(-1, 1, 1, 1) * 0.3  # something to learn

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        return self.images[i], int(self.labels[i])

    def get_batch(self, idx: torch.Tensor):
        return self.images[idx], self.labels[idx]


def noise(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """An augmentation that draws from its generator (per rank under DDP)."""
    return images + 0.05 * torch.randn(images.shape, generator=generator)


def spy_writes(out: Path, log: list[str]) -> None:
    """Record every attempt of this process to write under ``out``."""
    root = str(out.resolve())

    def under(path: object) -> bool:
        try:
            full = str(Path(os.fsdecode(path)).resolve())
        except (TypeError, ValueError):
            return False
        return full == root or full.startswith(root + os.sep)

    real_open, real_os_open, real_replace = builtins.open, os.open, os.replace
    real_mkdir = Path.mkdir

    def open_(file, mode="r", *a, **k):
        if isinstance(file, str | bytes | os.PathLike) and any(c in mode for c in "wax+"):
            if under(file):
                log.append(f"open {file} {mode}")
        return real_open(file, mode, *a, **k)

    def os_open(path, flags, *a, **k):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and under(path):
            log.append(f"os.open {path}")
        return real_os_open(path, flags, *a, **k)

    def replace(src, dst, *a, **k):
        if under(dst):
            log.append(f"replace {dst}")
        return real_replace(src, dst, *a, **k)

    def mkdir(self, *a, **k):
        if under(self) and not self.exists():
            log.append(f"mkdir {self}")
        return real_mkdir(self, *a, **k)

    builtins.open, os.open, os.replace = open_, os_open, replace
    Path.mkdir = mkdir


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--report", required=True)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--save-every", type=int, default=0)
    p.add_argument("--augment", action="store_true")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--fsdp", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    rank = int(os.environ.get("RANK", 0))
    out = Path(args.out)
    writes: list[str] = []
    spy_writes(out, writes)
    report = Path(args.report)
    report.mkdir(parents=True, exist_ok=True)

    def dump() -> None:
        (report / f"writes-{rank}.json").write_text(json.dumps(writes))

    atexit.register(dump)
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
        dropout=args.dropout,
        # The key bias has an exactly zero gradient in theory (softmax ignores a shift shared
        # by a row), so Adam would normalise its rounding noise into full-size steps that no
        # two summation orders agree on; without it the comparison measures the trainer.
        qkv_bias=False,
    )
    config = TrainConfig(
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=3e-3,
        warmup_epochs=0.5,
        save_every=args.save_every,
        eval_batch_size=100,
        device="cpu",
        dist_timeout=60,
        fsdp=args.fsdp,
        tensorboard=False,
        quiet=True,
        progress=False,
    )
    trainer = Trainer(
        model,
        Synthetic(),
        Synthetic(100, seed=1),
        config,
        out_dir=out,
        augment=noise if args.augment else None,
    )
    result = trainer.fit(resume=args.resume)
    if rank == 0:
        print(json.dumps({"final_test_acc": result.final_test_acc, "steps": result.steps}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
