"""Trainer overhead: tfam's Trainer against a plain PyTorch loop on the same model and data.

Both sides run the same arithmetic per optimiser step: the same model, the same in-memory
batches in the same order, AdamW with the same parameter groups, the warmup-cosine schedule,
gradient clipping and label smoothing. The Trainer adds what it is for (task protocol, metric
sums, finite-loss check, progress bookkeeping); evaluation, checkpoints and logging are off on
both sides so that only the training loop is timed. Rounds alternate (trainer, plain, trainer,
...) so that a machine whose load changes affects both sides alike.

    python benchmarks/bench_trainer.py --threads 1 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

import tfam
from tfam.data import load_dataset
from tfam.training import TrainConfig, Trainer, build_optimizer, build_scheduler


def make_model(preset: str, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return tfam.create_model(preset)


def run_trainer(preset: str, data, cfg: TrainConfig) -> tuple[float, int, nn.Module]:
    model = make_model(preset, cfg.seed)
    trainer = Trainer(model, data, None, cfg)
    t = time.perf_counter()
    result = trainer.fit()
    return time.perf_counter() - t, result.steps, model


def run_plain(preset: str, data, cfg: TrainConfig) -> tuple[float, int, nn.Module]:
    """The loop a PyTorch user writes by hand."""
    model = make_model(preset, cfg.seed)
    steps_per_epoch = -(-len(data) // cfg.batch_size)
    total = cfg.epochs * steps_per_epoch
    optimizer = build_optimizer(model, cfg.lr, cfg.weight_decay, betas=cfg.betas, eps=cfg.eps)
    scheduler = build_scheduler(
        optimizer, round(cfg.warmup_epochs * steps_per_epoch), total, cfg.min_lr
    )
    generator = torch.Generator().manual_seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    model.train()
    steps = 0
    t = time.perf_counter()
    for _ in range(cfg.epochs):
        order = torch.randperm(len(data), generator=generator)
        for start in range(0, len(data), cfg.batch_size):
            x, y = data.get_batch(order[start : start + cfg.batch_size])
            optimizer.zero_grad(set_to_none=True)
            logits = model(x)
            loss = F.cross_entropy(logits, y, label_smoothing=cfg.label_smoothing)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_grad)
            optimizer.step()
            scheduler.step()
            steps += 1
    return time.perf_counter() - t, steps, model


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="vit_digits")
    p.add_argument("--data", default="digits")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    data = load_dataset(args.data, "train")
    cfg = TrainConfig(
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=2e-3,
        label_smoothing=0.1,
        device="cpu",
        quiet=True,
        progress=False,
        tensorboard=False,
    )
    # Warm-up round (allocator, first-call costs), not timed.
    run_trainer(args.preset, data, cfg)
    run_plain(args.preset, data, cfg)
    rows = []
    for r in range(args.rounds):
        t_trainer, steps_a, m_a = run_trainer(args.preset, data, cfg)
        t_plain, steps_b, m_b = run_plain(args.preset, data, cfg)
        assert steps_a == steps_b
        images = len(data) * args.epochs
        rows.append((r + 1, images / t_trainer, images / t_plain))
    # Same arithmetic, so the same weights up to the loss being summed then divided.
    drift = max(
        (a - b).abs().max().item()
        for a, b in zip(m_a.state_dict().values(), m_b.state_dict().values())
    )
    print(
        f"{args.preset} on {args.data}: {args.epochs} epochs x {steps_a // args.epochs} steps "
        f"of batch {args.batch_size}, {args.threads} thread(s), torch {torch.__version__}"
    )
    print(f"{'round':>5}  {'Trainer img/s':>13}  {'plain loop img/s':>16}  {'ratio':>6}")
    for r, a, b in rows:
        print(f"{r:>5}  {a:>13.0f}  {b:>16.0f}  {a / b:>6.3f}")
    med_a = statistics.median(a for _, a, _ in rows)
    med_b = statistics.median(b for _, _, b in rows)
    ratios = [a / b for _, a, b in rows]
    print(
        f"{'median':>5}  {med_a:>13.0f}  {med_b:>16.0f}  {statistics.median(ratios):>6.3f}"
        f"   (target >= 0.95; max weight difference after the run {drift:.1e})"
    )


if __name__ == "__main__":
    main()
