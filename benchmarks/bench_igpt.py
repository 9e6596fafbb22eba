"""iGPT (Chen et al. 2020) on tfam's small image datasets: pre-train by next-pixel prediction,
complete held-out images from their top half, and probe the features linearly.

    # digits: pre-train (the catalog recipe: 2-D RoPE, dropout 0.3, 120 epochs), completions
    # judged by a digits classifier, probe
    python benchmarks/bench_igpt.py --classifier runs/digits
    python benchmarks/bench_igpt.py --classifier runs/digits --greedy          # the likeliest pixels
    python benchmarks/bench_igpt.py --classifier runs/digits --set position=learned   # HF's table
    python benchmarks/bench_igpt.py --classifier runs/digits --pad 1 --concat
    python benchmarks/bench_igpt.py --run runs/digits-pixels --concat --top-half-posterior
    python benchmarks/bench_igpt.py --run runs/digits-pixels --classifier runs/digits   # reuse
    python benchmarks/bench_igpt.py --run runs/digits-pixels --classifier runs/digits --mbr 64
    # Fashion-MNIST 14x14, 16 grey levels: completion grid and probe vs raw pixels
    python benchmarks/bench_igpt.py --data fashion-mnist --max-minutes 30   # 2-D RoPE (recipe)
    python benchmarks/bench_igpt.py --data fashion-mnist --max-minutes 30 --set position=learned
    # a check of the script in seconds
    python benchmarks/bench_igpt.py --max-steps 5 --images 4 --samples 1 --probe-train 200

What it measures, on the data set's test split:

- **pre-training**: the run's test loss in nats and bits per pixel (loss / ln 2);
- **completion** (with ``--classifier RUN``, an image classifier of the same images, e.g.
  `tfam train vit --data digits`): the top half of each of ``--images`` test images is given,
  ``--samples`` completions are sampled (``--temperature``, default 1; ``--top-p``), and the classifier reads each
  completion; the share classified as the original's label is printed beside the classifier's
  accuracy on the originals themselves, on the prompts alone (bottom half black) and on a
  nearest-neighbour completion, measured in the same run: each prompt keeps the bottom half of
  the training image whose top half is nearest (Euclidean, over the palette's values), a
  non-parametric reference for what the top half tells; and (``--top-half-posterior``) what a
  supervised classifier of the top halves believes: an RBF SVM (C and gamma by 5-fold
  cross-validation, Platt-scaled probabilities from held-out folds) fitted on the labelled top halves of the train
  split, its accuracy and its mean probability of the true label on the test prompts. A
  completion sampled at temperature 1 shows the true digit as often as the model's belief in
  it, so a model as well informed as that classifier would complete about that mean
  probability correctly, before the judge's own errors. ``--greedy`` takes the most likely
  pixel at each step instead of sampling. ``--mbr N`` (minimum Bayes risk decoding) draws N
  completions an image and also scores, for k = 1, 4, 8, ..., N, the one of the first k whose
  summed L1 distance to the other k - 1 is least: the model's most typical completion, where
  one draw is a rarer reading as often as the model gives it weight. The grid of the first 8
  goes to ``OUT/completions.png`` (and the least-risk picks to ``OUT/completions-mbr.png``);
- **linear probe**: logistic regression (scikit-learn, standardised features) on the mean-pooled,
  final-normed features of block ``--layer`` (default: every block) of the train split, scored on
  the test split, next to the same logistic regression on the raw pixels (the palette's values),
  fitted in the same run, with the same choice of its regularisation: C chosen by 5-fold
  cross-validation on the training features alone (``--probe-c cv``, the default), or fixed
  (``--probe-c 1``: scikit-learn's default, what the README's earlier rows used). The model
  reads [start] + the first H*W - 1 pixels, as in pre-training. With ``--concat``, one more
  probe reads every probed block's features side by side (4 blocks x D numbers an image).
  ``--regions 1x1,2x2`` (the default) probes each block twice: mean-pooled over every
  position (1x1, the paper's probe) and pooled over the image's four quadrants apart (2x2:
  4 x D numbers; a raw-pixel probe knows where each pixel is, a whole-image mean does not;
  2x1: the top and bottom halves). Among the iGPT probes, the one with the best 5-fold
  cross-validation accuracy on the training features is reported as chosen, so the block and
  pooling compared with raw pixels are picked without the test split; McNemar's exact test
  then compares it with raw pixels image by image.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

import tfam
import tfam.cli
from tfam.data import resolve_data
from tfam.data.vision.palette import load_palette
from tfam.models.igpt import complete, hidden_by_layer, mbr_select, region_pool
from tfam.studies.stats import mcnemar
from tfam.viz import completion_grid

# The probes' inverse regularisation strengths tried by cross-validation (--probe-c cv).
PROBE_CS = [0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0]


def pretrain(args: argparse.Namespace) -> Path:
    """Train (or reuse ``--run``) the iGPT run; returns its directory."""
    if args.run:
        return Path(args.run)
    out = Path(args.out)
    argv = ["train", "igpt", "--data", f"{args.data}-pixels", "--out", str(out)]
    for flag, value in (
        ("--epochs", args.epochs),
        ("--max-steps", args.max_steps),
        ("--max-minutes", args.max_minutes),
        ("--pad", args.pad),
        ("--threads", args.threads),
        ("--ema", args.ema),
    ):
        if value is not None:
            argv += [flag, str(value)]
    for item in args.set or ():
        argv += ["--set", item]
    if args.refit:
        argv.append("--refit")
    argv += ["--seed", str(args.seed)]  # tfam train's default is 0 too
    code = tfam.cli.main(argv)
    if code != 0:
        raise SystemExit(f"tfam {' '.join(argv)} exited with {code}")
    return out


def classifier_inputs(run: Path, images: torch.Tensor) -> torch.Tensor:
    """uint8 images (N, C, H, W) normalised as the classifier run's preprocess.json says."""
    info = json.loads((run / "preprocess.json").read_text())
    mean = torch.tensor(info["mean"]).view(1, -1, 1, 1)
    std = torch.tensor(info["std"]).view(1, -1, 1, 1)
    return (images.float() / info["pixel_scale"] - mean) / std


def predict(model: Any, x: torch.Tensor, batch: int = 500) -> torch.Tensor:
    with torch.inference_mode():
        return torch.cat([model(x[i : i + batch]).argmax(-1) for i in range(0, len(x), batch)])


def completion_check(
    args: argparse.Namespace, run: Path, model: Any, train: Any, test: Any
) -> dict:
    palette, facts = load_palette(run)
    c, h, w = (int(v) for v in facts["image_shape"])
    n = min(args.images, len(test))
    rows = h // 2
    ids = test.ids[:n]
    g = torch.Generator().manual_seed(args.seed)
    start = time.perf_counter()
    chunk = max(1, 4096 // args.samples)  # prompts a batch: <= 4096 sequences decoded at once
    pixels = torch.cat(
        [
            complete(
                model,
                ids[i : i + chunk, : 1 + rows * w],
                h * w,
                samples=args.samples,
                generator=g,
                temperature=args.temperature,
                top_p=args.top_p,
                greedy=args.greedy,
            )
            for i in range(0, n, chunk)
        ]
    )
    seconds = time.perf_counter() - start
    shape = (c, h, w)
    originals = palette.decode(ids[:, 1:], shape)
    completions = palette.decode(pixels.flatten(0, 1), shape).view(n, args.samples, *shape)
    grid = run / "completions.png"
    labels = [test.classes[int(y)] for y in test.labels[:8]]
    completion_grid(
        originals[:8], completions[:8, :4], rows, grid, scale=palette.scale, labels=labels
    )
    result: dict[str, Any] = {
        "images": n,
        "samples": args.samples,
        "seconds": round(seconds, 1),
        "grid": str(grid),
        "pixels_equal": float(
            (pixels[:, :, rows * w :] == ids[:, None, 1 + rows * w :]).double().mean()
        ),
    }
    if args.classifier:
        clf_run = Path(args.classifier)
        classifier = tfam.from_pretrained(clf_run).eval()
        y = test.labels[:n]
        prompts = originals.clone()
        prompts[:, :, rows:] = 0
        result["classifier_on_originals"] = float(
            (predict(classifier, classifier_inputs(clf_run, originals)) == y).double().mean()
        )
        result["classifier_on_prompts"] = float(
            (predict(classifier, classifier_inputs(clf_run, prompts)) == y).double().mean()
        )
        got = predict(classifier, classifier_inputs(clf_run, completions.flatten(0, 1))).view(
            n, args.samples
        )
        result["completions_classified_as_original"] = float((got == y[:, None]).double().mean())
        if args.mbr:
            # Minimum Bayes risk over the first k draws of each image, k = 1 (the first draw
            # itself), 4, 8, ..., N (with two, each is as near the other: the first is kept).
            values = palette.colours()[pixels[:, :, rows * w :]].flatten(2)
            sizes = sorted({1, args.mbr} | {2**e for e in range(2, args.mbr.bit_length())})
            result["mbr"] = {}
            for k in sizes:
                pick = mbr_select(values[:, :k])
                result["mbr"][k] = float((got[torch.arange(n), pick] == y).double().mean())
            picks = completions[torch.arange(n), mbr_select(values)]
            result["mbr_grid"] = str(run / "completions-mbr.png")
            completion_grid(  # three plain draws beside the pick among all N
                originals[:8],
                torch.cat([completions[:8, :3], picks[:8, None]], dim=1),
                rows,
                run / "completions-mbr.png",
                scale=palette.scale,
                labels=labels,
                names=["draw 1", "draw 2", "draw 3", f"least risk of {args.mbr}"],
            )
        # The reference: the bottom half of the training image whose top half is nearest.
        values = palette.colours()
        top = rows * w
        nearest = torch.cdist(
            values[ids[:, 1 : 1 + top]].flatten(1).double(),
            values[train.ids[:, 1 : 1 + top]].flatten(1).double(),
        ).argmin(dim=1)
        pasted = torch.cat([ids[:, 1 : 1 + top], train.ids[nearest, 1 + top :]], dim=1)
        result["nearest_neighbour_classified_as_original"] = float(
            (predict(classifier, classifier_inputs(clf_run, palette.decode(pasted, shape))) == y)
            .double()
            .mean()
        )
        result["nearest_neighbour_images"] = len(train)
    if args.top_half_posterior:
        values, top = palette.colours(), rows * w
        result["top_half_svm"] = top_half_posterior(
            values[train.ids[:, 1 : 1 + top]].flatten(1).numpy(),
            train.labels.numpy(),
            values[ids[:, 1 : 1 + top]].flatten(1).numpy(),
            test.labels[:n].numpy(),
            args.seed,
        )
    return result


def top_half_posterior(
    x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray, seed: int
) -> dict[str, float]:
    """A supervised reference for completions: an RBF SVM on labelled top halves (N, P) ->
    its test accuracy, its mean probability of the true label and its log loss (nats)."""
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.model_selection import GridSearchCV
    from sklearn.svm import SVC

    grid = {"C": [1.0, 3.0, 10.0, 30.0], "gamma": ["scale", 0.003, 0.01, 0.03]}
    best = GridSearchCV(SVC(), grid, cv=5).fit(x_train, y_train).best_params_
    try:
        # libsvm's Platt scaling with pairwise coupling: on digits' top halves its test log
        # loss is well below CalibratedClassifierCV's one-vs-rest calibrations, so it is the
        # better estimate of the posterior. scikit-learn 1.9 deprecates it (FutureWarning).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            svm: Any = SVC(**best, probability=True, random_state=seed).fit(x_train, y_train)
        method = "libsvm Platt, pairwise coupling"
    except TypeError:  # scikit-learn without SVC(probability=...)
        svm = CalibratedClassifierCV(SVC(**best), cv=5, ensemble=False).fit(x_train, y_train)
        method = "CalibratedClassifierCV sigmoid"
    probs = svm.predict_proba(x_test)
    true = probs[np.arange(len(y_test)), np.searchsorted(svm.classes_, y_test)]
    return {
        "accuracy": float((svm.classes_[probs.argmax(1)] == y_test).mean()),
        "mean_probability_of_true_label": float(true.mean()),
        "log_loss": float(-np.log(np.clip(true, 1e-12, None)).mean()),
        "calibration": method,
        "train_images": len(x_train),
    }


def probe(
    args: argparse.Namespace, model: Any, train: Any, test: Any, grid: tuple[int, int]
) -> dict:
    """The linear probes: raw pixels, then each probed block (and with --concat the blocks side
    by side) for each --regions of the (H, W) ``grid``; -> {"train_images", "test_images",
    "probes": [record, ...], "chosen": the iGPT record with the best cross-validation
    accuracy, "chosen_vs_raw_pixels": McNemar's test}, a record being
    {"features", "regions", "layer" (None: concatenated), "test", "C", "cv"}."""
    from sklearn.linear_model import LogisticRegression, LogisticRegressionCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    correct: list[np.ndarray] = []  # per probe, in order: each test image right or not

    def fit_score(x_train: Any, x_test: Any) -> tuple[float, float, float | None]:
        """(test accuracy, the inverse regularisation C used, the 5-fold cross-validation
        accuracy on the training features at that C, or None): C fixed by --probe-c, or
        chosen by that cross-validation (the same for every feature set, raw pixels
        included)."""
        if args.probe_c == "cv":
            lr: Any = LogisticRegressionCV(
                Cs=PROBE_CS,
                cv=5,
                scoring="accuracy",
                max_iter=args.probe_iters,
                random_state=args.seed,
            )
        else:
            lr = LogisticRegression(C=float(args.probe_c), max_iter=args.probe_iters)
        clf = make_pipeline(StandardScaler(), lr)
        with warnings.catch_warnings():
            # scikit-learn 1.8+ announces changes to LogisticRegressionCV's defaults and
            # attributes that this probe does not touch (C_ is read the same way in each).
            warnings.simplefilter("ignore", FutureWarning)
            clf.fit(x_train, y_train)
        correct.append(clf.predict(x_test) == y_test)
        accuracy = float(correct[-1].mean())
        if args.probe_c != "cv":
            return accuracy, float(args.probe_c), None
        # scores_: {class: (folds, Cs)}, the same array for every class of a multinomial fit.
        folds = np.asarray(next(iter(lr.scores_.values())))
        cv = float(folds.mean(axis=0).max())
        return accuracy, float(np.ravel(lr.C_)[0]), cv

    def record(name: str, regions: str, layer: int | None, pair: tuple[Any, Any]) -> dict:
        test_acc, c, cv = fit_score(*pair)
        return {
            "features": name,
            "regions": regions,
            "layer": layer,
            "test": test_acc,
            "C": c,
            "cv": cv,
        }

    g = torch.Generator().manual_seed(args.seed)
    keep = (
        torch.randperm(len(train), generator=g)[: args.probe_train]
        if args.probe_train
        else torch.arange(len(train))
    )
    y_train, y_test = train.labels[keep].numpy(), test.labels.numpy()
    raw_train = train.palette.colours()[train.ids[keep, 1:]].flatten(1).numpy()
    raw_test = test.palette.colours()[test.ids[:, 1:]].flatten(1).numpy()
    probes = [record("raw pixels", "", None, (raw_train, raw_test))]
    layers = [args.layer] if args.layer else list(range(1, model.config.depth + 1))

    def feats(data: Any, index: torch.Tensor) -> dict[tuple[int, int], dict[int, Any]]:
        """{regions: {block: features}} for every --regions and probed block, from one forward
        pass per chunk of 500 images."""
        ids = data.ids[index, :-1]  # what pre-training read: [start] + the first H*W - 1 pixels
        chunks: dict[tuple[int, int], dict[int, list[torch.Tensor]]] = {
            r: {k: [] for k in layers} for r in args.regions
        }
        for i in range(0, len(ids), 500):
            hidden = hidden_by_layer(model, ids[i : i + 500], layers)
            for r in args.regions:
                for k, x in hidden.items():
                    chunks[r][k].append(region_pool(x, None, grid, r))
        return {r: {k: torch.cat(v).numpy() for k, v in c.items()} for r, c in chunks.items()}

    train_all, test_all = feats(train, keep), feats(test, torch.arange(len(test)))
    for regions in args.regions:
        tag = f"{regions[0]}x{regions[1]}"
        train_feats, test_feats = train_all[regions], test_all[regions]
        pooled = "mean-pooled" if regions == (1, 1) else f"mean-pooled over {tag} regions"
        for layer in layers:
            pair = train_feats[layer], test_feats[layer]
            probes.append(record(f"iGPT block {layer}, {pooled}", tag, layer, pair))
        if args.concat and len(layers) > 1:  # one probe on every block's features side by side
            pair = (
                np.concatenate([train_feats[k] for k in layers], axis=1),
                np.concatenate([test_feats[k] for k in layers], axis=1),
            )
            name = f"iGPT blocks {', '.join(map(str, layers))} concatenated, {pooled}"
            probes.append(record(name, tag, None, pair))
    out: dict[str, Any] = {"train_images": len(keep), "test_images": len(test), "probes": probes}
    if args.probe_c == "cv":  # chosen on the training features alone, then tested once
        best = max(range(1, len(probes)), key=lambda i: probes[i]["cv"])
        out["chosen"] = probes[best]
        # Image by image against raw pixels: McNemar's exact test on the test split.
        paired = mcnemar(correct[best].tolist(), correct[0].tolist())
        out["chosen_vs_raw_pixels"] = {
            "chosen_only": paired.a_only,
            "raw_pixels_only": paired.b_only,
            "p": paired.p,
            "describe": paired.describe("the chosen iGPT probe", "raw pixels"),
        }
    return out


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--data", choices=("digits", "fashion-mnist"), default="digits")
    p.add_argument("--run", help="reuse this iGPT run instead of training one")
    p.add_argument(
        "--out", default=None, help="the run directory to train (default: runs/bench-igpt-DATA)"
    )
    p.add_argument("--epochs", type=int, default=None, help="default: the catalog recipe's")
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--max-minutes", type=float, default=None)
    p.add_argument("--set", action="append", help="model config overrides, as tfam train --set")
    p.add_argument(
        "--pad", type=int, default=None, help="pre-training pad-crop in pixels (tfam train --pad)"
    )
    p.add_argument(
        "--threads", type=int, default=None, help="pre-training threads (default: the recipe's)"
    )
    p.add_argument(
        "--ema",
        type=float,
        default=None,
        help="pre-train with a weight average of this decay (tfam train --ema); the completions "
        "and the probe read the average",
    )
    p.add_argument(
        "--refit",
        action="store_true",
        help="pre-train again on train + validation for the chosen epochs (tfam train --refit); "
        "the completions and the probe read the refit model",
    )
    p.add_argument("--classifier", default=None, help="an image classifier run of the same images")
    p.add_argument(
        "--top-half-posterior",
        action="store_true",
        help="also fit an RBF SVM on the labelled top halves of the train split and print its "
        "accuracy and mean probability of the true label on the test prompts: what the top half "
        "tells a supervised model (seconds on digits)",
    )
    p.add_argument("--images", type=int, default=360, help="test images to complete (default 360)")
    p.add_argument("--samples", type=int, default=4, help="completions per image (default 4)")
    p.add_argument(
        "--mbr",
        type=int,
        default=None,
        metavar="N",
        help="minimum Bayes risk decoding: draw N completions an image (in place of --samples) "
        "and also score, for k = 1, 4, 8, ..., N, the one of the first k nearest on average to the "
        "others (L1 over the pixels' values); needs --classifier",
    )
    p.add_argument("--layer", type=int, default=None, help="probe this block only (default: each)")
    p.add_argument(
        "--probe-train", type=int, default=None, help="train images for the probe (default: all)"
    )
    p.add_argument("--probe-iters", type=int, default=2000)
    p.add_argument(
        "--regions",
        default="1x1,2x2",
        help="comma-separated ROWSxCOLUMNS: pool each block's features over each cell of this "
        "partition of the image apart (1x1: the mean over every position, the paper's probe; "
        "2x2: the four quadrants side by side); each is probed (default 1x1,2x2)",
    )
    p.add_argument(
        "--concat",
        action="store_true",
        help="also probe the probed blocks' features concatenated (one probe, all blocks; "
        "needs two or more blocks, so not with --layer)",
    )
    p.add_argument(
        "--probe-c",
        default="cv",
        help="the probes' inverse regularisation C: a number, or cv (default): chosen from "
        f"{PROBE_CS} by 5-fold cross-validation on the training features",
    )
    p.add_argument(
        "--temperature", type=float, default=1.0, help="sampling temperature (default 1)"
    )
    p.add_argument("--top-p", type=float, default=None, help="nucleus sampling (default: off)")
    p.add_argument(
        "--greedy",
        action="store_true",
        help="the most likely pixel at each step instead of sampling (one completion an image)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="the pre-training run's seed (weights, data order, dropout; the splits stay fixed) "
        "and the completions' and probe's (default 0)",
    )
    p.add_argument("--json", default=None, help="write the results here too")
    args = p.parse_args()
    if args.concat and args.layer:
        p.error(f"--concat with --layer {args.layer}: one block has nothing to concatenate")
    given = args.regions
    try:
        args.regions = list(
            dict.fromkeys(tuple(int(v) for v in r.split("x")) for r in given.split(","))
        )
    except ValueError:
        args.regions = []
    if not args.regions or any(len(r) != 2 or min(r) < 1 for r in args.regions):
        p.error(
            f"--regions {given}: expected comma-separated ROWSxCOLUMNS (each >= 1), e.g. 1x1,2x2"
        )
    if args.greedy:
        args.samples = 1  # greedy completions of one prompt are all the same
    if args.mbr is not None:
        if args.mbr < 2 or args.greedy or not args.classifier:
            p.error(
                f"--mbr {args.mbr}: expected an int >= 2 with --classifier, without --greedy "
                "(it picks among sampled completions, judged by the classifier)"
            )
        args.samples = args.mbr
    args.out = args.out or f"runs/bench-igpt-{args.data}"
    torch.set_num_threads(1)

    run = pretrain(args)
    model = tfam.from_pretrained(run).eval()
    entry = resolve_data(f"{args.data}-pixels")
    train, test = entry.load("train"), entry.load("test")
    results: dict[str, Any] = {"run": str(run), "data": entry.name}
    record = json.loads((run / "results.json").read_text())
    loss = record["test"]["loss"]
    results["pretraining"] = {"test_loss": loss, "bits_per_pixel": loss / math.log(2)}
    print(
        f"pre-training: test loss {loss:.4f} nats/pixel = {loss / math.log(2):.4f} bits/pixel ({run})"
    )
    results["completion"] = completion_check(args, run, model, train, test)
    comp = results["completion"]
    decoding = "greedy" if args.greedy else f"temperature {args.temperature:g}, top-p {args.top_p}"
    print(
        f"completion: {comp['images']} test images x {comp['samples']} samples from the top half "
        f"({decoding}) in "
        f"{comp['seconds']} s; completed pixels equal to the original's {100 * comp['pixels_equal']:.1f}%; "
        f"grid {comp['grid']}"
    )
    if "completions_classified_as_original" in comp:
        print(
            f"  classifier {args.classifier}: completions classified as the original digit "
            f"{100 * comp['completions_classified_as_original']:.1f}% (originals "
            f"{100 * comp['classifier_on_originals']:.1f}%, top halves alone "
            f"{100 * comp['classifier_on_prompts']:.1f}%, the nearest of "
            f"{comp['nearest_neighbour_images']} training top halves' bottom half pasted "
            f"{100 * comp['nearest_neighbour_classified_as_original']:.1f}%)"
        )
    if "mbr" in comp:
        print(
            "  minimum Bayes risk (the one of the first k draws nearest on average to the "
            "others): "
            + ", ".join(f"k={k} {100 * a:.1f}%" for k, a in comp["mbr"].items())
            + f"; grid {comp['mbr_grid']}"
        )
    if "top_half_svm" in comp:
        svm = comp["top_half_svm"]
        print(
            f"  an RBF SVM on {svm['train_images']} labelled training top halves: "
            f"{100 * svm['accuracy']:.1f}% of the test prompts right, mean probability of the "
            f"true label {100 * svm['mean_probability_of_true_label']:.1f}%, log loss "
            f"{svm['log_loss']:.3f} nats ({svm['calibration']}): what a completion at "
            "temperature 1 would get right, before the judge, from a model that knew as much"
        )
    _, h, w = (int(v) for v in load_palette(run)[1]["image_shape"])
    results["probe"] = probe(args, model, train, test, (h, w))
    pr = results["probe"]
    print(
        f"linear probe (logistic regression on {pr['train_images']} train images; test "
        "accuracy, C, 5-fold cross-validation accuracy on the train images):"
    )
    for r in pr["probes"]:
        cv = "" if r["cv"] is None else f", cv {100 * r['cv']:.2f}%"
        print(f"  {r['features']}: {100 * r['test']:.2f}% (C {r['C']:g}{cv})")
    if "chosen" in pr:
        raw, chosen = pr["probes"][0], pr["chosen"]
        print(
            f"  chosen by cross-validation among the iGPT probes: {chosen['features']}: "
            f"{100 * chosen['test']:.2f}% against raw pixels' {100 * raw['test']:.2f}% "
            f"({round((chosen['test'] - raw['test']) * pr['test_images']):+d} test images; "
            f"{pr['chosen_vs_raw_pixels']['describe']})"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
