"""Study ``vision``: ``004_*`` asks what DeiT's and Swin's innovations are. Each is measured:

1. DeiT's is the distillation token that learns from a teacher. The same DeiT (tfam's
   :class:`~tfam.models.DeiT`, [CLS] and [DIST] tokens, two heads averaged) is trained with
   and without a teacher, the same steps, on Fashion-MNIST; the teacher is tfam's ResNet
   trained first (a convnet teacher, as the paper's best), the loss DeiT's hard distillation
   (tfam's ``image-distillation`` task).
2. Swin's is attention within shifted windows, merged stage by stage: a cost linear in the
   image's area where ViT's grows with its square. ``tfam explain``'s FLOPs of Swin-T and
   ViT-B/16 at 224, 448 and 896 pixels (as ``benchmarks/bench_swin_flops.py``), and of the two
   small models trained here at 28, 56 and 112; and their test accuracy at 28 x 28 at about
   the same parameter count and the same steps.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tfam.models import create_config, create_model
from tfam.studies.base import Context, Profile, Section, Study, md_table, register_study
from tfam.studies.cnn_attention import build_model
from tfam.studies.common import machine, seeded
from tfam.studies.images import (
    explain_flops,
    fashion,
    image_accuracy,
    parameters,
    train_images,
)
from tfam.studies.stats import compare, summarize
from tfam.training.tasks import task_for

__all__ = ["STUDENTS", "VisionStudy", "build_student"]

STUDENTS = {
    "deit+teacher": "DeiT distilled from the CNN teacher (hard distillation)",
    "deit": "the same DeiT without a teacher (both heads learn the labels)",
    "vit": "ViT (global attention)",
    "swin": "Swin (7 x 7 shifted windows, 2 stages)",
}
# The models whose FLOPs are read at growing image sizes: paper-sized (quick, full) and the
# small ones trained here.
PAPER = {"Swin-T": ("swin_tiny_patch4_window7_224", {}), "ViT-B/16": ("vit_base_patch16_224", {})}


def small_flops_models(s: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """The trained small ViT and Swin as (preset, overrides) for ``tfam.explain``."""
    return {
        "Swin (here)": ("swin_fashion_mnist", {"dim": s["swin_dim"], "heads": s["swin_heads"]}),
        "ViT (here)": ("vit_fashion_mnist", dict(class_token=False, pool="mean", dim=s["dim"],
                       ffn_dim=2 * s["dim"], heads=s["heads"], depth=s["depth"])),
    }  # fmt: skip


def build_student(kind: str, s: dict[str, Any]) -> nn.Module:
    """A model of :data:`STUDENTS` at the study's sizes (28 x 28 grey, 10 classes)."""
    if kind in ("deit", "deit+teacher"):
        return create_model("deit_fashion_mnist", dim=s["dim"], ffn_dim=2 * s["dim"],
                                 heads=s["heads"], depth=s["depth"])  # fmt: skip
    if kind == "vit":
        return build_model("vit", s)
    if kind == "swin":
        return create_model("swin_fashion_mnist", dim=s["swin_dim"], heads=s["swin_heads"])
    raise ValueError(f"model {kind!r} is invalid: expected one of {', '.join(STUDENTS)}")


@register_study
class VisionStudy(Study):
    name = "vision"
    title = "DeiT with and without its teacher; Swin vs ViT in accuracy and FLOPs"
    claim = (
        "004_* asks what DeiT's and Swin's innovations are: DeiT learns from a teacher through "
        "a distillation token, and Swin's shifted windows make attention's cost linear in the "
        "image's area instead of quadratic."
    )
    questions = ("004_* question 5: DeiT and Swin's innovations", "study 12 vision")
    profiles = {
        "tiny": Profile(
            dict(
                dim=16,
                depth=1,
                heads=2,
                cnn_widths=[4, 8],
                swin_dim=12,
                swin_heads=2,
                steps=2,
                teacher_steps=2,
                batch=16,
                lr=2e-3,
                eval_test=128,
                paper=False,
                sizes_small=[28, 56],
            ),  # fmt: skip
            expected="~5 s",
        ),
        "quick": Profile(
            dict(
                dim=48,
                depth=4,
                heads=4,
                cnn_widths=[8, 16, 32, 64],
                swin_dim=24,
                swin_heads=2,
                steps=300,
                teacher_steps=300,
                batch=32,
                lr=2e-3,
                eval_test=2000,
                paper=True,
                sizes_small=[28, 56, 112],
                sizes_paper=[224, 448, 896],
            ),  # fmt: skip
            expected="~6 min, not measured: a teacher and 12 runs of 300 steps at 33 (CNN), 55 "
            "(ViT, DeiT), 117 (Swin) ms of CPU a step (batch 32, one thread), evaluation, FLOPs",
        ),
        "full": Profile(
            dict(
                dim=48,
                depth=4,
                heads=4,
                cnn_widths=[8, 16, 32, 64],
                swin_dim=24,
                swin_heads=2,
                steps=3000,
                teacher_steps=3000,
                batch=32,
                lr=2e-3,
                eval_test=10000,
                paper=True,
                sizes_small=[28, 56, 112],
                sizes_paper=[224, 448, 896],
            ),  # fmt: skip
            expected="~50 min, not measured: 10 x the quick profile's steps",
        ),
    }

    def setup(self, ctx: Context) -> str:
        s = ctx.settings
        swin = create_config("swin_fashion_mnist", dim=s["swin_dim"], heads=s["swin_heads"])
        return (
            "Fashion-MNIST, the 60,000 training images (each run a seeded stream of "
            f"{s['steps']} x {s['batch']} of them), scored on {s['eval_test']} evenly spread "
            f"test images. Teacher: tfam's ResNet (widths {s['cnn_widths']}), trained "
            f"{s['teacher_steps']} steps once (seed 0). Students, each trained {s['steps']} "
            f"AdamW steps through tfam's Trainer (lr {s['lr']}, 10% warmup, cosine, weight decay "
            f"0.05, no augmentation): DeiT and ViT with 4 x 4 patches, D={s['dim']}, "
            f"{s['depth']} blocks, {s['heads']} heads, mean pool; DeiT with a teacher uses "
            "tfam's image-distillation task (hard labels from the teacher, alpha 0.5), without "
            "one the image-classification task on the average of its two heads; Swin: "
            f"swin_fashion_mnist at C={s['swin_dim']}, {s['swin_heads']} heads (2 x 2 patches, "
            f"7 x 7 windows, stages of depth 2 and 2, {swin.position} positions, init std "
            f"{swin.init_std}, drop-path {swin.drop_path}, as the preset). FLOPs: tfam.explain "
            "on the meta device (one image, a multiply-add = 2 FLOPs). Machine: "
            f"{machine()}; the 2 cores were shared with other work."
        )

    def teacher(self, ctx: Context, train: Any, test: Any) -> nn.Module:
        """The CNN teacher: trained once, its weights kept in the output folder so a rerun
        that resumes the study distils from the same teacher."""
        s = ctx.settings
        path = ctx.out / "teacher.pt"
        seeded(0)
        model = build_model("cnn", s)
        if path.exists() and "teacher" in ctx.store:
            model.load_state_dict(torch.load(path, weights_only=True))
            return model.eval()

        def run() -> dict[str, Any]:
            secs = train_images(model, train, dict(s, steps=s["teacher_steps"]), 0)
            torch.save(model.state_dict(), path)
            return {"test_acc": image_accuracy(model, test, s["eval_test"]),
                    "parameters": parameters(model), "train_seconds": secs}  # fmt: skip

        ctx.store.put("teacher", run())
        return model.eval()

    def measure(self, ctx: Context) -> None:
        s = ctx.settings
        # FLOPs first: seconds, no training (a run cut short still has them).
        models = dict(small_flops_models(s), **(PAPER if s["paper"] else {}))
        for title, (preset, over) in models.items():
            sizes = s["sizes_paper"] if title in PAPER else s["sizes_small"]
            for size in sizes:
                ctx.once(f"flops/{title}/{size}",
                         lambda p=preset, o=over, z=size: explain_flops(p, z, **o))  # fmt: skip
        train, test = fashion("train"), fashion("test")
        teacher = self.teacher(ctx, train, test)
        jobs = [(k, seed) for seed in ctx.seeds for k in STUDENTS]
        with ctx.progress.bar(len(jobs), "vision: train") as step:
            for kind, seed in jobs:

                def run(kind: str = kind, seed: int = seed) -> dict[str, Any]:
                    seeded(seed)
                    model = build_student(kind, s)
                    task = None
                    if kind == "deit+teacher":
                        task = task_for("image-distillation", train, teacher=teacher,
                                        kind="hard", alpha=0.5, tau=1.0)  # fmt: skip
                    secs = train_images(model, train, s, seed, task=task)
                    return {"test_acc": image_accuracy(model, test, s["eval_test"]),
                            "parameters": parameters(model), "train_seconds": secs}  # fmt: skip

                ctx.once(f"{kind}/seed{seed}", run)
                step(f"{kind} seed {seed}")

    def acc(self, ctx: Context, kind: str) -> list[float]:
        return [ctx.store.get(f"{kind}/seed{sd}")["test_acc"] for sd in ctx.seeds]

    def flops_table(self, ctx: Context) -> tuple[dict[str, list[int]], dict[str, list[dict]]]:
        s = ctx.settings
        titles = list(small_flops_models(s)) + (list(PAPER) if s["paper"] else [])
        sizes = {t: s["sizes_paper"] if t in PAPER else s["sizes_small"] for t in titles}
        recs = {t: [ctx.store.get(f"flops/{t}/{z}") for z in sizes[t]] for t in titles}
        return sizes, recs

    def report(self, ctx: Context) -> tuple[list[Section], list[str]]:
        teach = ctx.store.get("teacher")
        rows = [["CNN teacher (seed 0)", teach["parameters"], f"{100 * teach['test_acc']:.1f}"]]
        for k in STUDENTS:
            p = ctx.store.get(f"{k}/seed{ctx.seeds[0]}")["parameters"]
            rows.append([f"{k}: {STUDENTS[k]}", p, summarize(self.acc(ctx, k)).format(1, 100)])
        sizes, recs = self.flops_table(ctx)
        frows = []
        for t, rs in recs.items():
            for z, r in zip(sizes[t], rs):
                frows.append([t, f"{z} x {z}", f"{(z / sizes[t][0]) ** 2:g}",
                              f"{r['flops'] / 1e9:.4g}", f"{r['flops'] / rs[0]['flops']:.2f}",
                              f"{r['attention_flops'] / max(rs[0]['attention_flops'], 1):.2f}"])  # fmt: skip
        png = ctx.figure("vision.png")
        self._plot(ctx, sizes, recs, png)
        sections = [
            Section(
                "Test accuracy (28 x 28 Fashion-MNIST)",
                md_table(["model", "parameters", "test acc (%)"], rows),
            ),  # fmt: skip
            Section(
                "FLOPs as the image grows (tfam explain)",
                md_table(
                    ["model", "image", "area x", "GFLOPs", "FLOPs x", "attention FLOPs x"], frows
                )  # fmt: skip
                + f"\n\n![accuracy and FLOPs against image size]({png.name})",
            ),
        ]
        conclusions = []
        d = compare(self.acc(ctx, "deit+teacher"), self.acc(ctx, "deit"))
        conclusions.append(
            f"DeiT with the CNN teacher ({100 * teach['test_acc']:.1f}% itself) against the "
            "same DeiT without it: "
            + d.describe("with the teacher", "without", digits=1, scale=100, unit="points")
            + (
                ". DeiT's distillation helps here."
                if d.counts and d.diff > 0
                else ". The teacher's benefit is not shown here."
            )
        )
        conclusions.append(
            "Swin against ViT at 28 x 28, about the same parameters and steps: "
            + compare(self.acc(ctx, "swin"), self.acc(ctx, "vit")).describe(
                "Swin", "ViT", digits=1, scale=100, unit="points")
            + "."
        )  # fmt: skip
        for t, rs in recs.items():
            area = (sizes[t][-1] / sizes[t][0]) ** 2
            grow = rs[-1]["flops"] / rs[0]["flops"]
            attn = rs[-1]["attention_flops"] / max(rs[0]["attention_flops"], 1)
            kind = "linear in the area" if grow <= 1.05 * area else "faster than the area"
            conclusions.append(
                f"{t}: from {sizes[t][0]} to {sizes[t][-1]} pixels a side (x{area:g} the area) "
                f"its FLOPs grow x{grow:.2f} ({kind}), its attention FLOPs x{attn:.2f}."
            )
        return sections, conclusions

    def _plot(self, ctx: Context, sizes: dict, recs: dict, png: Any) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from tfam.viz.figure import save_figure

        fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
        names = list(STUDENTS)
        m = [summarize(self.acc(ctx, k)) for k in names]
        a.bar(range(len(names)), [100 * v.mean for v in m], yerr=[100 * v.std for v in m],
              capsize=4, color=["C0", "C1", "C2", "C3"])  # fmt: skip
        a.axhline(100 * ctx.store.get("teacher")["test_acc"], color="k", ls="--", lw=1,
                  label="CNN teacher")  # fmt: skip
        a.set_xticks(range(len(names)), names)
        a.set_ylim(max(0.0, 100 * min(v.mean for v in m) - 15), 100)
        a.set_ylabel("test accuracy (%)")
        a.set_title("Fashion-MNIST, same steps")
        a.legend(fontsize=8)
        for t, rs in recs.items():
            b.plot(sizes[t], [r["flops"] / rs[0]["flops"] for r in rs], marker="o", label=t)
        for t in recs:  # the area's growth, for reference (one line per base size)
            z = sizes[t]
            b.plot(z, [(x / z[0]) ** 2 for x in z], color="grey", ls=":", lw=1)
        b.set_xscale("log")
        b.set_yscale("log")
        b.set_xlabel("image side (pixels)")
        b.set_ylabel("FLOPs / FLOPs at the smallest size")
        b.set_title("FLOPs growth (dotted: the area)")
        b.legend(fontsize=7)
        fig.tight_layout()
        save_figure(fig, png)
        plt.close(fig)
