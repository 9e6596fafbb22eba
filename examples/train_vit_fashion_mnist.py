"""Train a Vision Transformer on Fashion-MNIST (60k/10k 28x28 images), end to end, in Python.

    python examples/train_vit_fashion_mnist.py                 # ~91.6%; ~35 min on 2 CPU cores
    python examples/train_vit_fashion_mnist.py --max-steps 30  # a one-minute smoke run

Needs the data locally (tfam never downloads): `sudo apt-get install dataset-fashion-mnist`,
or the four IDX files in ~/.cache/tfam/fashion-mnist. Stop it with Ctrl-C at any time: it
saves a checkpoint, and `--resume` continues exactly where it stopped.
The same run from the command line: `tfam train vit --data fashion-mnist`.
"""

from __future__ import annotations

import argparse
import time

import torch

import tfam
from tfam.data import default_augment, load_dataset
from tfam.training import TrainConfig, Trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=24)
    parser.add_argument("--max-steps", type=int, default=None, help="stop early (smoke run)")
    parser.add_argument("--out", default="runs/fashion-mnist-example")
    parser.add_argument("--resume", action="store_true", help="continue a stopped run in --out")
    args = parser.parse_args()

    train = load_dataset("fashion-mnist", "train")
    test = load_dataset("fashion-mnist", "test")

    # 4x4 patches -> 49 tokens + [CLS], D = 96, 4 blocks of 4 heads, MLP 2D, fixed 2-D
    # sine-cosine positions, mean pooling (about 0.30 M parameters). The same settings as
    # `tfam train vit --data fashion-mnist`.
    torch.manual_seed(0)
    model = tfam.create_model("vit_fashion_mnist")
    print(f"vit_fashion_mnist: {sum(p.numel() for p in model.parameters()):,} parameters")

    config = TrainConfig(
        epochs=args.epochs,
        batch_size=128,
        lr=2e-3,
        weight_decay=0.05,
        warmup_epochs=1,
        label_smoothing=0.1,
        clip_grad=1.0,
        save_every=100,  # a checkpoint every 100 steps as well as at each epoch end
        max_steps=args.max_steps,
    )
    start = time.perf_counter()
    # A 1 px random crop and flips (tfam.data.vision.augment says why not 2 px, and why not flips alone).
    augment = default_augment("fashion-mnist")
    trainer = Trainer(model, train, test, config, out_dir=args.out, augment=augment)
    result = trainer.fit(resume=args.resume)
    print(
        f"test accuracy {100 * result.final_test_acc:.2f}% (best {100 * result.best_test_acc:.2f}%)"
        f" after {result.steps} steps, {time.perf_counter() - start:.1f} s in this process"
    )


if __name__ == "__main__":
    main()
