"""The README's folder line on a generated image folder: `tfam train vit --data DIR --out OUT`,
unchanged (no preset, no --set: the model and the schedule are sized from the data), against a
plain PyTorch CNN of similar size trained the plain way on the same fit / validation split.

The folder is made offline from Fashion-MNIST (/usr/share/datasets/fashion-mnist or
--fmnist DIR; 28x28 grayscale), `--per-class` images of each class taken at random (seeded)
from its train file, resized with Pillow (bilinear) to `--size`; `--rgb` tints each image
with a random colour, so the folder holds RGB files. Without the Fashion-MNIST files, two or
three kinds of drawn shapes (disc, square, triangle; random place, size and grey) are drawn
with Pillow instead; the table says which.

    python benchmarks/bench_folder.py                               # 2 classes, 40x40, 70 each
    python benchmarks/bench_folder.py --size 28
    python benchmarks/bench_folder.py --size 64 --classes 3 --rgb

Both runs are scored on the folder's validation holdout (tfam's seeded, class-stratified 20%:
the reference trains on exactly tfam's "fit" split and is scored on its "val" split). Run on
a quiet machine: the runs are sequential, not interleaved; the table prints the load average.
Both use one CPU thread (tfam's sizing sets it for models this small).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageDraw
from torch import nn

FMNIST = Path("/usr/share/datasets/fashion-mnist")
# T-shirt/top, trouser, bag: the first `--classes` of them.
FMNIST_CLASSES = ((0, "tshirt"), (1, "trouser"), (8, "bag"))
SHAPES = ("disc", "square", "triangle")


def _fmnist_images(root: Path) -> tuple[np.ndarray, np.ndarray] | None:
    from tfam.data.sources.idx import read_idx

    images, labels = root / "train-images-idx3-ubyte.gz", root / "train-labels-idx1-ubyte.gz"
    if not (images.is_file() and labels.is_file()):
        return None
    return read_idx(images), read_idx(labels)


def _shape(kind: str, size: int, rng: np.random.Generator) -> Image.Image:
    im = Image.new("L", (size, size), int(rng.integers(0, 60)))
    draw = ImageDraw.Draw(im)
    r = rng.uniform(0.2, 0.4) * size
    cx, cy = rng.uniform(r, size - r, 2)
    fill = int(rng.integers(150, 256))
    if kind == "disc":
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill)
    elif kind == "square":
        draw.rectangle([cx - r, cy - r, cx + r, cy + r], fill=fill)
    else:
        draw.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=fill)
    return im


def make_folder(
    out: Path,
    *,
    size: int = 40,
    classes: int = 2,
    per_class: int = 70,
    rgb: bool = False,
    seed: int = 0,
    fmnist: Path = FMNIST,
) -> str:
    """Write ``out/<class>/<i>.png`` and return where the images came from."""
    rng = np.random.default_rng(seed)
    data = _fmnist_images(fmnist)
    names = [n for _, n in FMNIST_CLASSES[:classes]] if data else list(SHAPES[:classes])
    for c, name in enumerate(names):
        (out / name).mkdir(parents=True, exist_ok=True)
        if data:
            pool = np.flatnonzero(data[1] == FMNIST_CLASSES[c][0])
            picks = rng.choice(pool, per_class, replace=False)
        for i in range(per_class):
            if data:
                im = Image.fromarray(data[0][picks[i]]).resize((size, size), Image.BILINEAR)
            else:
                im = _shape(name, size, rng)
            if rgb:
                tint = rng.uniform(0.3, 1.0, 3)
                pixels = np.asarray(im, dtype=np.float32)[..., None] * tint
                im = Image.fromarray(pixels.astype(np.uint8), "RGB")
            im.save(out / name / f"{i:03d}.png")
    return f"Fashion-MNIST classes {', '.join(names)}" if data else f"drawn {', '.join(names)}"


class PlainCNN(nn.Module):
    """Two conv blocks and a linear head: the plain small-data baseline."""

    def __init__(self, channels: int, classes: int, width: int = 32) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, width, 3, padding=1),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(2 * width, 4 * width, 3, padding=1),
            nn.BatchNorm2d(4 * width),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.head = nn.Linear(4 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def plain_reference(folder: Path, epochs: int = 60, batch: int = 16) -> dict[str, float]:
    """A small CNN, Adam 1e-3, flips, on tfam's fit split; scored on its val split."""
    from tfam.data.sources.folder import ImageFolder

    torch.manual_seed(0)
    fit, val = ImageFolder(folder, "fit"), ImageFolder(folder, "val")
    x = torch.stack([fit[i][0] for i in range(len(fit))])
    y = fit.labels
    xv = torch.stack([val[i][0] for i in range(len(val))])
    model = PlainCNN(fit.in_channels, fit.num_classes)
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    start = time.perf_counter()
    for _ in range(epochs):
        model.train()
        for idx in torch.randperm(len(x)).split(batch):
            xb = x[idx]
            flip = torch.rand(len(idx)) < 0.5
            xb = torch.where(flip.view(-1, 1, 1, 1), xb.flip(-1), xb)
            loss = F.cross_entropy(model(xb), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    seconds = time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        acc = (model(xv).argmax(-1) == val.labels).float().mean().item()
    params = sum(p.numel() for p in model.parameters())
    return {"val": acc, "seconds": seconds, "params": params}


def tfam_run(folder: Path, out: Path) -> dict[str, object]:
    """The README's line, in a child process; what it printed and reached."""
    cmd = [sys.executable, "-m", "tfam", "train", "vit", "--data", str(folder), "--out", str(out)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"tfam train failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    record = json.loads((out / "results.json").read_text())
    config = json.loads((out / "config.json").read_text())
    params = None
    for line in proc.stdout.splitlines():
        if " parameters) on " in line:
            params = int(line.split("(")[1].split(" parameters")[0].replace(",", ""))
    header = [ln for ln in proc.stdout.splitlines() if "sized from the data" in ln or " on " in ln]
    return {
        "val": record["val"].get("acc"),
        "best_val": (record.get("best_val") or {}).get("acc"),
        "best_epoch": record["best_epoch"],
        "seconds": record["seconds"],
        "wall": wall,
        "params": params,
        "header": header[:2],
        "config": config,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=40)
    p.add_argument("--classes", type=int, default=2, choices=(2, 3))
    p.add_argument("--per-class", type=int, default=70)
    p.add_argument("--rgb", action="store_true")
    p.add_argument("--fmnist", type=Path, default=FMNIST)
    p.add_argument("--ref-epochs", type=int, default=60)
    args = p.parse_args()

    with tempfile.TemporaryDirectory(prefix="tfam-bench-folder-") as tmp:
        folder = Path(tmp) / "photos"
        source = make_folder(
            folder,
            size=args.size,
            classes=args.classes,
            per_class=args.per_class,
            rgb=args.rgb,
            fmnist=args.fmnist,
        )
        load = os.getloadavg()
        ours = tfam_run(folder, Path(tmp) / "run")
        # One thread, as tfam's sized run: on a shared 2-core machine a second thread made
        # these small models many times slower.
        torch.set_num_threads(1)
        ref = plain_reference(folder, epochs=args.ref_epochs)
        load_after = os.getloadavg()
    kind = "RGB" if args.rgb else "grey"
    print(
        f"folder: {args.classes} classes x {args.per_class} {args.size}x{args.size} {kind} "
        f"images ({source}); load average {load[0]:.2f} before, {load_after[0]:.2f} after"
    )
    for line in ours["header"]:
        print(f"  {line}")
    print()
    print("| model | parameters | validation accuracy | training time |")
    print("|---|---|---|---|")
    best = ours["best_val"]
    best_text = f" (best {best:.2%} at epoch {ours['best_epoch']})" if best is not None else ""
    print(
        f"| tfam `tfam train vit --data DIR --out OUT` | {ours['params']:,} | "
        f"{ours['val']:.2%}{best_text} | {ours['seconds']:.0f} s ({ours['wall']:.0f} s wall) |"
    )
    print(
        f"| plain PyTorch CNN, Adam 1e-3, {args.ref_epochs} epochs of batch 16 | "
        f"{ref['params']:,} | {ref['val']:.2%} | {ref['seconds']:.0f} s |"
    )


if __name__ == "__main__":
    main()
