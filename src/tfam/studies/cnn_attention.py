"""Study ``attention-vs-cnn``: ``001_*`` says a CNN is self-attention restricted to a receptive
field, and that with little data the more flexible self-attention overfits.

Three models of about the same parameter count, trained the same way (tfam's Trainer, the
same steps, lr, schedule and no augmentation) on 1%, 3%, 10%, 30% and 100% of Fashion-MNIST's
60,000 training images (stratified subsets drawn per seed):

- ``vit``: tfam's ViT (4 x 4 patches: a 7 x 7 grid, sine-cosine positions, mean pool, no
  [CLS]), every patch attending to every patch;
- ``vit-local``: the same ViT with the ``local`` kernel on its 7 x 7 grid at window 1: each
  patch attends to its 3 x 3 neighbourhood of patches, the receptive field of a 3 x 3
  convolution over the same grid (the restricted self-attention of the claim);
- ``cnn``: tfam's ResNet (3 x 3 convolutions, BatchNorm, global average pool).

Each is scored on the test images and on the subset it trained on; the train-test gap is the
overfitting the claim speaks of.

Before training, the restriction itself is shown exactly (:func:`dependencies`): which of the
7 x 7 input tokens each output token depends on (the gradient's non-zero blocks, float64), for
N local-attention blocks against N stacked 3 x 3 convolutions over the same grid (the same
sets, growing as (2N + 1) x (2N + 1)), and for global attention (every token).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from tfam.models import create_model
from tfam.studies.base import Context, Profile, Section, Study, md_table, register_study
from tfam.studies.common import machine, seeded
from tfam.studies.images import fashion, image_accuracy, parameters, stratified, train_images
from tfam.studies.stats import compare, summarize

__all__ = ["MODELS", "AttentionVsCNNStudy", "build_model", "dependencies"]

MODELS = {
    "vit": "ViT, global attention",
    "vit-local": "ViT, 2-D local attention (3 x 3 patches)",
    "cnn": "ResNet (3 x 3 convolutions)",
}
GRID = 7  # 28 px / 4 px patches


def build_model(kind: str, s: dict[str, Any]) -> nn.Module:
    """``kind`` of :data:`MODELS` at the sizes of settings ``s`` (a 28 x 28 grey image, 10
    classes); built from tfam's Fashion-MNIST presets with the study's widths."""
    if kind == "cnn":
        w = list(s["cnn_widths"])
        return create_model("resnet_fashion_mnist", embedding_size=w[0], hidden_sizes=w,
                                 depths=[1] * len(w))  # fmt: skip
    vit = dict(class_token=False, pool="mean", dim=s["dim"], ffn_dim=2 * s["dim"],
               heads=s["heads"], depth=s["depth"])  # fmt: skip
    if kind == "vit-local":
        # Window 1 on the patch grid: the 3 x 3 neighbourhood a 3 x 3 convolution reads.
        vit.update(attention="local",
                   attention_options={"window": 1, "grid": [GRID, GRID], "prefix": 0})  # fmt: skip
    elif kind != "vit":
        raise ValueError(f"model {kind!r} is invalid: expected one of {', '.join(MODELS)}")
    return create_model("vit_fashion_mnist", **vit)


def dependencies(kind: str, depth: int, dim: int = 8, seed: int = 0) -> Tensor:
    """(L, L) bool, L = 49: whether output token i depends on input token j (d out_i / d x_j
    non-zero, float64) for ``depth`` blocks of ``kind`` over the 7 x 7 grid:
    "vit" (global attention), "vit-local" (window 1) or "conv" (3 x 3 convolutions, padding 1,
    each followed by a ReLU, on the grid's (D, 7, 7) map)."""
    torch.manual_seed(seed)
    x = torch.randn(GRID * GRID, dim, dtype=torch.float64)
    if kind == "conv":
        layers = [m for _ in range(depth) for m in (nn.Conv2d(dim, dim, 3, padding=1), nn.ReLU())]
        net = nn.Sequential(*layers).double()

        def fn(t: Tensor) -> Tensor:  # (L, D) tokens in raster order <-> (D, 7, 7) map
            return net(t.T.reshape(1, dim, GRID, GRID)).reshape(dim, -1).T

    else:
        from tfam.layers.position import TokenPositions

        model = build_model(kind, {"dim": dim, "heads": 2, "depth": depth}).double().eval()
        where = TokenPositions.on_grid((GRID, GRID), 0)

        def fn(t: Tensor) -> Tensor:
            return model.encoder(t[None], positions=where)[0][0]

    # Row i: the gradient of out_i . r (r random) by every input token; zero for a token out_i
    # does not read (and, with probability 1, non-zero for one it reads).
    x.requires_grad_(True)
    out = fn(x)  # (L, D)
    r = torch.randn(out.shape, dtype=torch.float64)
    rows = [torch.autograd.grad(out[i] @ r[i], x, retain_graph=True)[0] for i in range(len(out))]
    return torch.stack(rows).abs().amax(dim=-1) > 0


def run_one(kind: str, fraction: float, seed: int, s: dict[str, Any], data: Any) -> dict[str, Any]:
    """Train ``kind`` on a stratified ``fraction`` of the training images (drawn with ``seed``);
    its accuracy on that subset and on the test images."""
    train_all, test = data
    n = max(10, round(fraction * len(train_all)))
    subset = stratified(train_all, n, seed)
    seeded(seed)
    model = build_model(kind, s)
    secs = train_images(model, subset, s, seed)
    train_acc = image_accuracy(model, subset, s["eval_train"])
    test_acc = image_accuracy(model, test, s["eval_test"])
    return {"images": n, "parameters": parameters(model), "train_acc": train_acc,
            "test_acc": test_acc, "gap": train_acc - test_acc, "train_seconds": secs}  # fmt: skip


def _pct(f: float) -> str:
    return f"{100 * f:g}%"


@register_study
class AttentionVsCNNStudy(Study):
    name = "attention-vs-cnn"
    parallel = True  # independent training runs: tfam study --jobs N
    title = "ViT vs a CNN as the training set shrinks; local attention as a convolution"
    claim = (
        "001_* says a CNN is self-attention restricted to a receptive field, and that with "
        "little data the more flexible self-attention overfits (it needs more data than a CNN)."
    )
    questions = (
        "001_*: a CNN is a restricted self-attention; with little data self-attention overfits",
        "study 3 attention-vs-cnn",
    )
    profiles = {
        "tiny": Profile(
            dict(
                fractions=[0.01, 0.03],
                dim=16,
                depth=1,
                heads=2,
                cnn_widths=[4, 8],
                steps=2,
                batch=8,
                lr=3e-3,
                eval_train=32,
                eval_test=64,
            ),  # fmt: skip
            expected="~5 s",
        ),
        "quick": Profile(
            dict(
                fractions=[0.01, 0.03, 0.1, 0.3, 1.0],
                dim=48,
                depth=4,
                heads=4,
                cnn_widths=[8, 16, 32, 64],
                steps=120,
                batch=32,
                lr=3e-3,
                eval_train=1000,
                eval_test=2000,
            ),  # fmt: skip
            expected="~7 min, not measured: 45 runs of 120 steps at 55 / 81 / 33 ms of CPU a step "
            "(ViT / local ViT / CNN, batch 32, one thread) plus evaluation",
        ),
        "full": Profile(
            dict(
                fractions=[0.01, 0.03, 0.1, 0.3, 1.0],
                dim=48,
                depth=4,
                heads=4,
                cnn_widths=[8, 16, 32, 64],
                steps=2000,
                batch=32,
                lr=2e-3,
                eval_train=5000,
                eval_test=10000,
            ),  # fmt: skip
            expected="~1.8 h on one thread (45 runs of 2,000 steps plus evaluation)",
            measured="6,360 s on one thread of the 2-core CPU beside one other single-thread study",
        ),
    }

    def setup(self, ctx: Context) -> str:
        s = ctx.settings
        seen = s["steps"] * s["batch"]
        return (
            f"Fashion-MNIST (28 x 28 grey), stratified subsets of the 60,000 training images "
            f"({', '.join(_pct(f) for f in s['fractions'])}), drawn per seed. ViT: 4 x 4 "
            f"patches (a 7 x 7 grid), D={s['dim']}, {s['depth']} blocks, {s['heads']} heads, "
            f"MLP {2 * s['dim']}, sine-cosine positions, mean pool; vit-local: the same with "
            "attention='local', window 1 on the 7 x 7 grid (each patch sees its 3 x 3 "
            f"neighbourhood); CNN: tfam's ResNet, 3 x 3 stem, one basic block per stage of "
            f"widths {s['cnn_widths']}. Every run: {s['steps']} AdamW steps of {s['batch']} "
            f"images through tfam's Trainer (lr {s['lr']}, 10% warmup, cosine, weight decay "
            f"0.05, clip 1, no augmentation), i.e. {seen} images: a subset smaller than that is "
            "seen several times, a larger one in part. Train accuracy on up to "
            f"{s['eval_train']} images of the run's subset, test accuracy on {s['eval_test']} "
            f"evenly spread test images. Machine: {machine()}; the 2 cores were shared with "
            "other work."
        )

    def measure(self, ctx: Context) -> None:
        s = ctx.settings
        for depth in (1, 2):

            def deps(depth: int = depth) -> dict[str, Any]:
                d = {k: dependencies(k, depth) for k in ("vit", "vit-local", "conv")}
                return {"same_as_conv": bool(torch.equal(d["vit-local"], d["conv"])),
                        **{f"{k}_min": int(v.sum(1).min()) for k, v in d.items()},
                        **{f"{k}_max": int(v.sum(1).max()) for k, v in d.items()}}  # fmt: skip

            ctx.once(f"receptive_field/depth{depth}", deps)
        data = (fashion("train"), fashion("test"))
        jobs = [(f, kind, seed) for f in s["fractions"] for seed in ctx.seeds for kind in MODELS]
        with ctx.progress.bar(len(jobs), "attention-vs-cnn: train") as step:
            for f, kind, seed in jobs:
                ctx.once(f"{kind}/{f}/seed{seed}",
                         lambda f=f, kind=kind, seed=seed: run_one(kind, f, seed, s, data))  # fmt: skip
                step(f"{kind} {_pct(f)} seed {seed}")

    def values(self, ctx: Context, kind: str, f: float, key: str) -> list[float]:
        return [ctx.store.get(f"{kind}/{f}/seed{sd}")[key] for sd in ctx.seeds]

    def report(self, ctx: Context) -> tuple[list[Section], list[str]]:
        s = ctx.settings
        fr = s["fractions"]
        params = {k: ctx.store.get(f"{k}/{fr[0]}/seed{ctx.seeds[0]}")["parameters"] for k in MODELS}
        rows = []
        for f in fr:
            n = ctx.store.get(f"cnn/{f}/seed{ctx.seeds[0]}")["images"]
            for k in MODELS:
                rows.append([_pct(f), n, k,
                             summarize(self.values(ctx, k, f, "train_acc")).format(1, 100),
                             summarize(self.values(ctx, k, f, "test_acc")).format(1, 100),
                             summarize(self.values(ctx, k, f, "gap")).format(1, 100)])  # fmt: skip
        png = ctx.figure("attention_vs_cnn.png")
        self._plot(ctx, png)
        rf = [ctx.store.get(f"receptive_field/depth{d}") for d in (1, 2)]
        rf_rows = [[d + 1] + [f"{r[k + '_min']}-{r[k + '_max']}" for k in ("vit", "vit-local", "conv")]
                   + ["yes" if r["same_as_conv"] else "NO"] for d, r in enumerate(rf)]  # fmt: skip
        sections = [
            Section(
                "The restriction, exactly: which input tokens each output token depends on",
                md_table(
                    [
                        "blocks / conv layers",
                        "global attention",
                        "local attention (window 1)",
                        "3 x 3 convolutions",
                        "local = conv (every token)",
                    ],
                    rf_rows,
                )
                + "\n\nInput tokens (of 49, on the 7 x 7 grid) each output token depends on, "
                "fewest-most (corner to centre); from gradients in float64.",
            ),  # fmt: skip
            Section(
                "Models",
                md_table(
                    ["model", "what", "parameters"], [[k, MODELS[k], params[k]] for k in MODELS]
                ),
            ),  # fmt: skip
            Section(
                "Accuracy and train-test gap by training-set size",
                md_table(
                    [
                        "training images",
                        "n",
                        "model",
                        "train acc (%)",
                        "test acc (%)",
                        "gap (points)",
                    ],
                    rows,
                )  # fmt: skip
                + f"\n\n![test accuracy and gap against the training-set size]({png.name})",
            ),
        ]
        conclusions = [
            "A CNN is self-attention restricted to a receptive field: "
            + (
                "shown exactly here: with window 1 on the patch grid, each output token of one "
                "and of two local-attention blocks depends on exactly the input tokens that one "
                "and two 3 x 3 convolutions read (3 x 3, then 5 x 5), where global attention "
                "reads all 49."
                if all(r["same_as_conv"] for r in rf)
                else "NOT shown: the local blocks' dependencies differ from the convolutions'."
            )
            + " (The weights differ: a convolution has a fixed weight per offset, attention "
            "weights computed from the content.)"
        ]
        small, large = fr[0], fr[-1]

        def cmp(a: str, b: str, f: float, key: str) -> Any:
            return compare(self.values(ctx, a, f, key), self.values(ctx, b, f, key))

        for f in (small, large):
            t = cmp("vit", "cnn", f, "test_acc")
            g = cmp("vit", "cnn", f, "gap")
            conclusions.append(
                f"With {_pct(f)} of the training images, test accuracy: "
                + t.describe("the ViT", "the CNN", digits=1, scale=100, unit="points")
                + "; train-test gap: "
                + g.describe("the ViT's", "the CNN's", digits=1, scale=100, unit="points")
                + "."
            )
        g_small = cmp("vit", "cnn", small, "gap")
        t_small = cmp("vit", "cnn", small, "test_acc")
        holds = g_small.counts and g_small.diff > 0 and t_small.counts and t_small.diff < 0
        conclusions.append(
            (
                f"The overfitting claim holds here: at {_pct(small)} the ViT overfits more "
                "(larger gap) and scores lower than the CNN of about the same size."
            )
            if holds
            else (
                f"The overfitting claim is not shown here: at {_pct(small)} the ViT does not "
                "both overfit more and score lower than the CNN by more than twice the "
                "standard error (see the lines above)."
            )
        )
        d_small = [a - b for a, b in zip(self.values(ctx, "cnn", small, "test_acc"),
                                         self.values(ctx, "vit", small, "test_acc"))]  # fmt: skip
        d_large = [a - b for a, b in zip(self.values(ctx, "cnn", large, "test_acc"),
                                         self.values(ctx, "vit", large, "test_acc"))]  # fmt: skip
        shrink = compare(d_small, d_large)
        conclusions.append(
            f"The CNN's lead in test accuracy (CNN - ViT) at {_pct(small)} against at "
            f"{_pct(large)}: "
            + shrink.describe(
                f"the lead at {_pct(small)}",
                f"the lead at {_pct(large)}",
                digits=1,
                scale=100,
                unit="points",
            )  # fmt: skip
            + "."
        )
        for f in (small, large):
            loc = cmp("vit-local", "vit", f, "test_acc")
            conclusions.append(
                f"Restricting attention to a convolution's 3 x 3 receptive field, at "
                f"{_pct(f)}: "
                + loc.describe("local attention", "global attention", digits=1, scale=100,
                               unit="points")  # fmt: skip
                + "; against the CNN: "
                + cmp("vit-local", "cnn", f, "test_acc").describe(
                    "local attention", "the CNN", digits=1, scale=100, unit="points")
                + "."
            )  # fmt: skip
        return sections, conclusions

    def _plot(self, ctx: Context, png: Any) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from tfam.viz.figure import save_figure

        fr = ctx.settings["fractions"]
        x = [100 * f for f in fr]
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.8))
        for k in MODELS:
            for ax, key in zip(axes, ("test_acc", "gap")):
                m = [summarize(self.values(ctx, k, f, key)) for f in fr]
                ax.errorbar(x, [100 * v.mean for v in m], yerr=[100 * v.std for v in m],
                            marker="o", capsize=3, label=MODELS[k])  # fmt: skip
        for ax, label in zip(axes, ("test accuracy (%)", "train - test accuracy (points)")):
            ax.set_xscale("log")
            ax.set_xlabel("training images used (% of 60,000)")
            ax.set_ylabel(label)
        axes[0].legend(fontsize=7)
        axes[0].set_title("Fashion-MNIST test accuracy")
        axes[1].set_title("overfitting: train-test gap")
        fig.tight_layout()
        save_figure(fig, png)
        plt.close(fig)
