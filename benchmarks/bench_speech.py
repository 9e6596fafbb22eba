"""The speech encoder on the spoken digits, next to a simple reference trained in the same run.

    python benchmarks/bench_speech.py --task tag                 # frame accuracy, words
    python benchmarks/bench_speech.py --task tag --labels phoneme
    python benchmarks/bench_speech.py --task transcribe          # word error rate (CTC)
    python benchmarks/bench_speech.py --task speaker             # who is speaking
    python benchmarks/bench_speech.py --task tag --max-steps 5 --root /tmp/tiny-corpus  # a check

Trains the catalog's recipe (``tfam train speech --data spoken-digits --task ...``: preset
speech_digits_*, 40 minutes at most on 2 CPU cores) and, beside it, a reference on the same
features: a per-frame MLP (M -> 256 -> 256 -> K, no context) for tagging and transcription
(with CTC), an MLP on each utterance's mean frame for the speaker; plus the majority class where
there are classes. Prints one table on the test split, by noise condition: tag and transcribe
on held-out voices (never heard in training), speaker on held-out utterances of the training
voices. Targets (issue 24): word tagging >= 90% at 20 and 10 dB, WER <= 10%, speaker >= 95%.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor, nn

import tfam
from tfam.data import get_dataset
from tfam.data.sources.speech import SpeechDataset
from tfam.training import TrainConfig, Trainer
from tfam.training.tasks import task_for

TASKS = {"tag": "frame-classification", "speaker": "utterance-classification",
         "transcribe": "ctc"}  # fmt: skip
CONDITIONS = (("clean", None), ("20 dB", 20.0), ("10 dB", 10.0), ("5 dB", 5.0))


class FrameMLP(nn.Module):
    """The reference: features (B, T, M) -> (B, T, K) frame by frame (tag, CTC), or the mean
    frame -> (B, K) (speaker). ``config.output_lengths`` is the identity (no subsampling)."""

    def __init__(self, mels: int, labels: int, pooled: bool, width: int = 256) -> None:
        super().__init__()
        self.pooled = pooled
        self.net = nn.Sequential(
            nn.Linear(mels, width), nn.GELU(), nn.Linear(width, width), nn.GELU(),
            nn.Linear(width, labels),
        )  # fmt: skip
        self.config = SimpleNamespace(output_lengths=lambda lengths: lengths)

    def forward(self, features: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        if self.pooled:
            m = attention_mask.to(features.dtype)[..., None]
            features = (features * m).sum(1) / m.sum(1).clamp(min=1)
        return self.net(features)


def batches(data: SpeechDataset, frames: int, generator: torch.Generator | None = None):  # noqa: ANN201
    """Index batches of about ``frames`` padded frames, by length; shuffled with a generator."""
    order = torch.argsort(data.lengths, stable=True)
    out, cur, longest = [], [], 0
    for i in order.tolist():
        n = int(data.lengths[i])
        if cur and max(longest, n) * (len(cur) + 1) > frames:
            out.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, n)
    if cur:
        out.append(cur)
    if generator is not None:
        out = [out[j] for j in torch.randperm(len(out), generator=generator).tolist()]
    return out


def evaluate(task: Any, model: nn.Module, data: SpeechDataset, frames: int = 32000) -> dict:
    model.eval()
    sums: dict[str, float] = {}
    with torch.inference_mode():
        for index in batches(data, frames):
            part = task.eval_sums(model, task.collate([data[i] for i in index]))
            for k, v in part.items():
                sums[k] = sums.get(k, 0.0) + float(v)
    return task.reduce(sums)


def train_reference(task: Any, model: nn.Module, data: SpeechDataset, epochs: int,
                    minutes: float, max_steps: int | None) -> int:  # fmt: skip
    """Adam, lr 1e-3, batches of 8,000 frames; ``epochs`` or ``minutes``, whichever first."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    start, steps = time.perf_counter(), 0
    for _ in range(epochs):
        for index in batches(data, 8000, g):
            model.train()
            batch = task.collate([data[i] for i in index])
            loss, _ = task.train_loss(model, batch, TrainConfig())
            opt.zero_grad()
            (loss / task.count(batch).clamp(min=1)).backward()
            opt.step()
            steps += 1
            if (max_steps and steps >= max_steps) or time.perf_counter() - start > 60 * minutes:
                return steps
    return steps


def majority(data: SpeechDataset, test: SpeechDataset) -> float:
    """The accuracy of always answering the training split's most frequent label."""
    train = torch.cat([torch.as_tensor(y).reshape(-1) for y in data.labels])
    label = int(torch.bincount(train[train >= 0]).argmax())
    gold = torch.cat([torch.as_tensor(y).reshape(-1) for y in test.labels])
    gold = gold[gold >= 0]
    return float((gold == label).double().mean())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", choices=tuple(TASKS), required=True)
    p.add_argument("--labels", choices=("word", "phoneme"), default=None, help="tag: word/phoneme")
    p.add_argument("--root", default=None, help="the corpus folder (default: tfam's cache)")
    p.add_argument("--max-steps", type=int, default=None, help="a quick check: stop both here")
    p.add_argument("--max-minutes", type=float, default=None, help="the model's budget")
    p.add_argument("--epochs", type=int, default=None, help="the model's epochs (the recipe's)")
    p.add_argument("--ref-epochs", type=int, default=10)
    p.add_argument("--ref-minutes", type=float, default=3.0)
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="model config overrides (a quick check: dim=16 depth=1 heads=2)",
    )
    p.add_argument("--out", default=None, help="run directory (default: in memory)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (2: the whole machine)")
    p.add_argument(
        "--seed", type=int, default=0, help="the model's initialisation and the data order (0)"
    )
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    task_name = TASKS[args.task]
    entry = get_dataset("spoken-digits").for_task(task_name, labels=args.labels)
    if args.task == "speaker" and args.root is not None:
        from tfam.data.sources.speech import spoken_digits_info

        entry = dataclasses.replace(entry, info=spoken_digits_info(task_name, root=args.root))
    t0 = time.perf_counter()
    train, val, test = (entry.load(s, root=args.root) for s in ("train", "val", "test"))
    print(f"spoken-digits for {args.task}: {len(train)} / {len(val)} / {len(test)} utterances "
          f"(features in {time.perf_counter() - t0:.0f} s)", flush=True)  # fmt: skip
    recipe = entry.recipe
    values = dict(recipe.train)
    if args.max_minutes is not None:
        values["max_minutes"] = args.max_minutes
    if args.epochs is not None:
        values["epochs"] = args.epochs
    if args.max_steps is not None:
        values.update(max_steps=args.max_steps, max_minutes=None)
    config = TrainConfig(**values, seed=args.seed, quiet=False, progress=False)
    overrides = {k: eval(v, {}) if v[:1].isdigit() else v
                 for k, v in (s.split("=", 1) for s in args.sets)}  # fmt: skip
    info = entry.info
    torch.manual_seed(args.seed)
    model = tfam.create_model(recipe.preset, n_mels=info.n_mels, num_labels=info.num_labels,
                              head=info.head, **overrides)  # fmt: skip
    opts = model.config.attention_options or {}
    print(f"{recipe.preset}: D={model.config.dim}, H={model.config.heads}, "
          f"{model.config.depth} blocks, {model.config.subsampling}x subsampling, attention "
          f"{model.config.attention} window {opts.get('window', '-')}, "
          f"{model.num_parameters():,} parameters", flush=True)  # fmt: skip
    task = task_for(task_name, train)
    trainer = Trainer(model, train, test, config, out_dir=args.out, val_set=val, task=task)
    t0 = time.perf_counter()
    trainer.fit()
    model_minutes = (time.perf_counter() - t0) / 60
    ref = FrameMLP(info.n_mels, info.num_labels, pooled=args.task == "speaker")
    t0 = time.perf_counter()
    steps = train_reference(task, ref, train, args.ref_epochs, args.ref_minutes, args.max_steps)
    ref_minutes = (time.perf_counter() - t0) / 60
    metric = task.primary_metric
    rows = []
    for name, snr in (*CONDITIONS, ("all", "all")):
        keep = [i for i, s in enumerate(test.snr_db) if snr == "all" or s == snr]
        if not keep:
            continue
        part = test.subset(keep)
        mine = trainer.evaluate_metrics(part)[metric]
        theirs = evaluate(task, ref, part)[metric]
        base = majority(train, part) if metric == "acc" else math.nan
        rows.append((name, len(keep), mine, theirs, base))
    what = {"tag": f"frame accuracy ({info.labels or 'word'}s), held-out voices",
            "speaker": "speaker accuracy, held-out utterances",
            "transcribe": "word error rate (greedy CTC), held-out voices"}[args.task]  # fmt: skip
    print(f"\n{what}: {recipe.preset} ({model_minutes:.1f} min) vs per-frame MLP reference "
          f"({steps} steps, {ref_minutes:.1f} min)")  # fmt: skip
    print(f"{'condition':<10} {'utts':>5} {'model':>8} {'MLP':>8} {'majority':>9}")
    for name, n, mine, theirs, base in rows:
        b = "-" if math.isnan(base) else f"{100 * base:.2f}%"
        print(f"{name:<10} {n:>5} {100 * mine:>7.2f}% {100 * theirs:>7.2f}% {b:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
