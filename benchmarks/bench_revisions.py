"""tfam at an earlier revision against tfam as it is now, in one process, interleaved.

A restructuring must not cost speed. This loads the package twice: the working tree's `tfam`,
and `tfam` as it was at ``--base`` (extracted with `git archive` into a temporary folder and
imported as `tfam_base`, its own imports rewritten to that name). Both sides get the same
weights; each row calls the two alternately (which goes first rotates every round,
`benchmarks/timing.py`) and prints the median over rounds of base time / new time (> 1: the
new code is faster). The rows are the README's benchmark workloads:

- ViT-S/16 and ViT-B/16: inference at batch 1 and 16, a training step at batch 16;
- the encoder–decoder (transformer_base): forward, and cached greedy decoding of 100 tokens;
- GPT-2 (124 M): cached greedy decoding of 128 tokens;
- the Trainer: one epoch of vit_digits on digits (evaluation and checkpoints off).

    python benchmarks/bench_revisions.py --base 04aee59 --rounds 7
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from timing import interleaved  # noqa: E402

import tfam  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

_IMPORTS = [
    (re.compile(r"\bfrom tfam\b"), "from tfam_base"),
    (re.compile(r"\bimport tfam\.data\b"), "import tfam_base.data"),
    (re.compile(r"\bimport tfam\b(?!_)"), "import tfam_base as tfam"),
    (re.compile(r"([\"'])tfam\."), r"\1tfam_base."),
]


def import_base(rev: str, into: Path):
    """tfam as it was at ``rev``, importable as ``tfam_base``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "src/tfam"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    package = into / "tfam_base"
    (into / "src" / "tfam").rename(package)
    for path in package.rglob("*.py"):
        text = path.read_text()
        for pattern, repl in _IMPORTS:
            text = pattern.sub(repl, text)
        # `import tfam.data` was followed by uses of `tfam.data.X`.
        if "import tfam_base.data" in text:
            text = text.replace("import tfam_base.data", "import tfam_base as tfam")
        path.write_text(text)
    sys.path.insert(0, str(into))
    return importlib.import_module("tfam_base")


def same_weights(new_model: torch.nn.Module, base_model: torch.nn.Module) -> None:
    missing = base_model.load_state_dict(new_model.state_dict(), strict=False)
    if missing.missing_keys or missing.unexpected_keys:
        raise SystemExit(f"the two revisions name their weights differently: {missing}")


def vit_rows(new, base, preset: str, rounds: int) -> list[tuple[str, float, float, float]]:
    torch.manual_seed(0)
    m_new = new.create_model(preset).eval()
    m_base = base.create_model(preset).eval()
    same_weights(m_new, m_base)
    rows = []
    for batch in (1, 16):
        x = torch.randn(batch, 3, *m_new.config.image_size)
        with torch.inference_mode():
            assert torch.equal(m_new(x), m_base(x)), "outputs differ"
            (t_new, t_base), (_, ratio) = interleaved(
                [lambda x=x: m_new(x), lambda x=x: m_base(x)], rounds, warmup=2
            )
        rows.append((f"{preset} inference b{batch}", t_new, t_base, ratio))
    x = torch.randn(16, 3, *m_new.config.image_size)
    y = torch.randint(0, m_new.config.num_classes, (16,))
    steps = []
    for m in (m_new, m_base):
        m.train()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4)

        def step(m=m, opt=opt) -> None:
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(m(x), y).backward()
            opt.step()

        steps.append(step)
    (t_new, t_base), (_, ratio) = interleaved(steps, rounds, warmup=2)
    rows.append((f"{preset} train step b16", t_new, t_base, ratio))
    return rows


def transformer_rows(new, base, rounds: int) -> list[tuple[str, float, float, float]]:
    torch.manual_seed(0)
    m_new = new.create_model("transformer_base", vocab_size=8000, dropout=0.0).eval()
    m_base = base.create_model("transformer_base", vocab_size=8000, dropout=0.0).eval()
    same_weights(m_new, m_base)
    c = m_new.config
    src = torch.randint(4, c.vocab_size, (4, 32))
    tgt = torch.randint(4, c.vocab_size, (4, 32))
    tgt[:, 0] = c.bos_token_id
    rows = []
    with torch.no_grad():
        assert torch.equal(m_new(src, tgt), m_base(src, tgt)), "outputs differ"
        (t_new, t_base), (_, ratio) = interleaved(
            [lambda: m_new(src, tgt), lambda: m_base(src, tgt)], rounds
        )
        rows.append(("transformer_base forward B=4 L=32", t_new, t_base, ratio))

        def greedy(m):
            return lambda: m.generate(src, max_new_tokens=100, eos_token_id=[])

        assert torch.equal(greedy(m_new)(), greedy(m_base)()), "tokens differ"
        (t_new, t_base), (_, ratio) = interleaved([greedy(m_new), greedy(m_base)], rounds)
        rows.append(("transformer_base greedy 100 tokens", t_new, t_base, ratio))
    return rows


def gpt_rows(new, base, rounds: int) -> list[tuple[str, float, float, float]]:
    torch.manual_seed(0)
    m_new = new.create_model("gpt2").eval()
    m_base = base.create_model("gpt2").eval()
    same_weights(m_new, m_base)
    prompt = torch.randint(0, m_new.config.vocab_size, (1, 8))

    def greedy(m):
        return lambda: m.generate(prompt, max_new_tokens=128, eos_token_id=[])

    with torch.inference_mode():
        assert torch.equal(greedy(m_new)(), greedy(m_base)()), "tokens differ"
        (t_new, t_base), (_, ratio) = interleaved([greedy(m_new), greedy(m_base)], rounds)
    return [("gpt2 cached greedy 128 tokens", t_new, t_base, ratio)]


def trainer_rows(new, base, rounds: int) -> list[tuple[str, float, float, float]]:
    results = {}

    def fit(lib, key):
        training = importlib.import_module(f"{lib.__name__}.training")
        data = importlib.import_module(f"{lib.__name__}.data").load_dataset("digits", "train")
        cfg = training.TrainConfig(
            epochs=1, batch_size=128, lr=2e-3, label_smoothing=0.1, device="cpu",
            quiet=True, progress=False, tensorboard=False,
        )  # fmt: skip

        def run() -> None:
            torch.manual_seed(cfg.seed)
            model = lib.create_model("vit_digits")
            training.Trainer(model, data, None, cfg).fit()
            results[key] = model.state_dict()

        return run

    (t_new, t_base), (_, ratio) = interleaved([fit(new, "new"), fit(base, "base")], rounds)
    same = all(torch.equal(a, b) for a, b in zip(results["new"].values(), results["base"].values()))
    assert same, "the two trainers ended with different weights"
    return [("Trainer: vit_digits, 1 epoch of digits", t_new, t_base, ratio)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", required=True, help="the git revision to compare with")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--rows",
        nargs="+",
        default=["vit", "transformer", "gpt", "trainer"],
        choices=["vit", "transformer", "gpt", "trainer"],
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        base = import_base(args.base, Path(tmp))
        print(
            f"tfam at {args.base} (base) vs the working tree (new), torch {torch.__version__}, "
            f"{args.threads} thread{'s' if args.threads != 1 else ''}, median of {args.rounds} "
            "interleaved rounds; outputs checked equal before timing"
        )
        rows = []
        if "vit" in args.rows:
            for preset in ("vit_small_patch16_224", "vit_base_patch16_224"):
                rows += vit_rows(tfam, base, preset, args.rounds)
        if "transformer" in args.rows:
            rows += transformer_rows(tfam, base, args.rounds)
        if "gpt" in args.rows:
            rows += gpt_rows(tfam, base, args.rounds)
        if "trainer" in args.rows:
            rows += trainer_rows(tfam, base, args.rounds)
    print(f"{'workload':<40} {'new s':>8} {'base s':>8} {'base/new':>9}")
    for what, t_new, t_base, ratio in rows:
        # interleaved's ratio is t_base / t_new per round: > 1 means the new code is faster.
        print(f"{what:<40} {t_new:>8.3f} {t_base:>8.3f} {ratio:>8.3f}x")
    worst = min(r[3] for r in rows)
    print(f"worst row: {worst:.3f}x (target >= 0.97x)")


if __name__ == "__main__":
    main()
