"""Character-level GPT on the King James Bible: tfam's `tfam train gpt --data kjv` against a
plain PyTorch GPT trained with nanoGPT's CPU setting, on the same text, scored the same way.

Both models are scored on the test books (1 John .. Revelation, held out whole; see
tfam.data.sources.charlm) in nats per character, every test character predicted once (windows of each
model's own context, stride = context). The reference is written here in plain PyTorch in the
shape of nanoGPT's `train_shakespeare_char` CPU setting (4 blocks, 4 heads, D = 128, context 64,
batch 12, AdamW lr 1e-3 with warmup and cosine decay to 1e-4, no dropout), trained on random
windows of the training books for `--ref-iters` steps (6,000 took 271 s in
../shared/calibration.md). tfam trains with the kjv recipe of its catalog under `--minutes` of
training time. Run on a quiet machine: the two runs are sequential, not interleaved.

    python benchmarks/bench_charlm.py                 # about 10 minutes on 2 CPU cores
    python benchmarks/bench_charlm.py --minutes 5 --ref-iters 6000
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tfam.data.sources.charlm import kjv_char_text, kjv_char_tokenizer


# -- the plain PyTorch reference (nanoGPT's shape) --------------------------------------------
class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: Tensor) -> Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(d, dim=-1)
        q, k, v = (t.view(b, n, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.ln_2(x))


class PlainGPT(nn.Module):
    def __init__(self, vocab: int, context: int, dim: int = 128, depth: int = 4, heads: int = 4):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied, as nanoGPT
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, ids: Tensor) -> Tensor:
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def train_reference(
    train_ids: Tensor, vocab: int, iters: int, seed: int
) -> tuple[nn.Module, float]:
    """nanoGPT's CPU setting on random windows of the training text -> (model, seconds)."""
    context, batch, lr, min_lr, warmup = 64, 12, 1e-3, 1e-4, 100
    torch.manual_seed(seed)
    model = PlainGPT(vocab, context)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
        lr=lr,
        betas=(0.9, 0.99),
    )
    gen = torch.Generator().manual_seed(seed)
    model.train()
    start = time.perf_counter()
    for it in range(iters):
        if it < warmup:
            rate = lr * (it + 1) / warmup
        else:
            ratio = (it - warmup) / max(1, iters - warmup)
            rate = min_lr + 0.5 * (1 + math.cos(math.pi * ratio)) * (lr - min_lr)
        for group in opt.param_groups:
            group["lr"] = rate
        offsets = torch.randint(len(train_ids) - context - 1, (batch,), generator=gen)
        rows = torch.stack([train_ids[o : o + context + 1] for o in offsets.tolist()])
        loss = F.cross_entropy(model(rows[:, :-1]).flatten(0, 1), rows[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return model, time.perf_counter() - start


@torch.inference_mode()
def held_out_nats(model: nn.Module, ids: Tensor, context: int) -> float:
    """Mean cross-entropy over every character after the first of full windows (stride =
    context), each predicted once."""
    model.eval()
    n = (len(ids) - 1) // context
    total, count = 0.0, 0
    for start in range(0, n, 64):
        rows = torch.stack(
            [ids[k * context : k * context + context + 1] for k in range(start, min(n, start + 64))]
        )
        logits = model(rows[:, :-1]).float()
        total += F.cross_entropy(
            logits.flatten(0, 1), rows[:, 1:].flatten(), reduction="sum"
        ).item()
        count += rows[:, 1:].numel()
    return total / count


def encode(text: str, tokenizer) -> Tensor:  # noqa: ANN001
    return torch.tensor(tokenizer.encode(text), dtype=torch.long)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--minutes", type=float, default=5.0, help="tfam's training budget")
    p.add_argument("--ref-iters", type=int, default=6000, help="reference optimiser steps")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="tfam run directory (default: a temporary one)")
    p.add_argument("--skip-reference", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    tokenizer = kjv_char_tokenizer()
    train_ids = encode(kjv_char_text("train"), tokenizer)
    test_ids = encode(kjv_char_text("test"), tokenizer)
    rows = []

    if not args.skip_reference:
        ref, ref_seconds = train_reference(
            train_ids, tokenizer.vocab_size, args.ref_iters, args.seed
        )
        rows.append(
            (
                f"plain PyTorch, nanoGPT CPU setting ({args.ref_iters} steps, context 64)",
                ref_seconds,
                held_out_nats(ref, test_ids, 64),
            )
        )
        print(f"reference: {rows[-1][2]:.4f} nats/char after {ref_seconds:.0f} s", flush=True)

    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="tfam-bench-kjv-"))
    command = [
        sys.executable, "-m", "tfam", "train", "gpt", "--data", "kjv", "--out", str(out),
        "--max-minutes", f"{args.minutes:g}", "--threads", str(args.threads),
        "--seed", str(args.seed), "--quiet",
    ]  # fmt: skip
    print("$", " ".join(command[2:]).replace("-m tfam", "tfam"), flush=True)
    subprocess.run(command, check=True)
    results = json.loads((out / "results.json").read_text())
    train_args = json.loads((out / "train_args.json").read_text())
    context = train_args["model_config"]["max_positions"]
    rows.append(
        (
            f"tfam train gpt --data kjv (recipe, {results['steps']} steps, context {context})",
            results["seconds"],
            results["test"]["loss"],
        )
    )

    print()
    print(f"{'run':<72} {'train s':>8} {'test nats/char':>15}")
    for name, seconds, nats in rows:
        print(f"{name:<72} {seconds:>8.0f} {nats:>15.4f}")
    if len(rows) == 2:
        print(f"\ntfam / reference held-out loss: {rows[1][2] / rows[0][2]:.3f} (lower is better)")
    print(f"target: <= 1.35 nats/char in <= {args.minutes:g} min of training; run in {out}")


if __name__ == "__main__":
    main()
