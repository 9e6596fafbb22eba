"""`tfam eval DIR`: accuracy, per-class accuracy and confusion matrix of an image model; BLEU
and chrF of a seq2seq (translation) run on its held-out sentences; the task's metrics (loss,
accuracy, bits per character) of a BERT or GPT run on its dataset's test split; a speech run's
(`tfam.cli.speech`) and a graph run's (`tfam.cli.graphs`: node or graph accuracy, or MAE, RMSE
and R² with a predicted-vs-true scatter)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from tfam.cli.common import (
    RUN_DIR_HELP,
    add_command,
    add_device_option,
    device_from,
    eval_split,
    note_chance,
    resolve_model,
)
from tfam.cli.text import add_decoding_options
from tfam.runs import run_is_seq2seq

EPILOG = """examples:
  tfam eval runs/digits                        test split of the dataset it was trained on
  tfam eval runs/digits --split train --out runs/digits/confusion_train.png
  tfam eval runs/photos --split val --device cuda       a model trained on an image folder
  tfam eval runs/kjv-rv                        sacreBLEU and chrF of a translation run, beam 4
  tfam eval runs/kjv-rv --limit 200 --beam 1   a quick check on the first 200 sentences
  tfam eval runs/sentiment                     a BERT sentence classifier: loss, accuracy, per class
  tfam eval runs/pos                           a BERT tagger: loss and per-word tag accuracy
  tfam eval runs/kjv                           a character GPT: nats and bits per character
  tfam eval runs/spoken-digits                 a speech run: frame accuracy per label, noise
                                               condition and voice; speaker accuracy; or WER
  tfam eval runs/karate                        the club's 30 unlabelled members: accuracy, which are wrong
  tfam eval runs/nci-tpsa                      MAE, RMSE, R² in Å², the worst molecules, a scatter PNG

Speech runs: the run's data for its task (spoken-digits with the run's --labels and
--data-root; your audio folder or CSV on its validation holdout); a confusion matrix PNG for
frame tagging and speakers, reference / hypothesis lines for transcription (greedy CTC).

Graph runs: the run's data (karate with the labelled members its --seed drew, kept in
DIR/graph.json; your CSV of SMILES or edge-list folder as trained, on its test file or
validation holdout). Node classification: accuracy over the split's labelled nodes (the club's
unlabelled members), per class, each wrong node, a confusion PNG; graph classification:
accuracy, per class, the wrong molecules, a confusion PNG; graph regression: MAE, RMSE and R² in
the data's units beside predicting the training mean, the worst molecules (SMILES, true,
predicted) and a predicted-vs-true scatter with the y = x line (default
DIR/predicted_vs_true.png).

Image runs: prints the accuracy and a per-class table, writes the confusion matrix (rows =
true class) as a PNG (default DIR/confusion.png) and every number into DIR/eval.json.

Seq2seq runs: translates the held-out sentences (sorted by length, in batches) and prints
sacreBLEU and chrF (the sacrebleu package with its default tokenisation, one reference per
sentence) and a few translations beside their references; writes the scores into
DIR/eval.json and every translation, one per line, to --out (default
DIR/translations_SPLIT.txt). Sources longer than the model's positions are truncated (counted).

BERT and GPT runs: the metrics of the task the run was trained for (labels.json, else the
dataset in DIR/train_args.json), computed as training computes them, on the test split of that
dataset: loss and accuracy over sentences (sequence classification, with a per-class table),
over words (tagging: each word's tag sits on its first piece), or over predicted tokens
(language models: loss in nats per token, and bits per character for a character-level
dataset). --data must be a dataset of the same task. The numbers go to DIR/eval.json.
"""

HELP = "accuracy, per-class table and confusion matrix of a trained model"
DESCRIPTION = "Evaluate a trained model (a run directory of `tfam train`) on a dataset split."
EXAMPLES_SHOWN = 5


def register(subparsers: argparse._SubParsersAction) -> None:
    p = add_command(subparsers, "eval", HELP, DESCRIPTION, EPILOG, run_dir=RUN_DIR_HELP)
    p.add_argument(
        "--data",
        metavar="NAME",
        default=None,
        help="dataset (default: the one in DIR/preprocess.json)",
    )
    p.add_argument(
        "--split",
        default=None,
        metavar="SPLIT",
        help="split to evaluate: train, fit, val or test (default: test, or val for an image "
        "folder)",
    )
    p.add_argument(
        "--out",
        metavar="FILE",
        default=None,
        help="confusion matrix image (default: DIR/confusion.png); for a seq2seq run the "
        "translations (default: DIR/translations_SPLIT.txt); for a graph regression run the "
        "predicted-vs-true scatter (default: DIR/predicted_vs_true.png)",
    )
    p.add_argument(
        "--root", metavar="DIR", default=None, help="where to look first for dataset files"
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="images per forward pass (default: 256), sentences per generate call (default: 32), "
        "or graphs per forward pass (default: 64)",
    )
    s = p.add_argument_group("seq2seq and text runs")
    s.add_argument(
        "--limit",
        type=int,
        default=None,
        metavar="N",
        help="evaluate the first N sentences (examples) of the split only (quick checks)",
    )
    add_decoding_options(s, truncate=False)
    add_device_option(p)
    p.set_defaults(func=run)


def _write_json(path: Path, data: dict) -> None:
    from tfam.training.results import write_json  # torch loads only when a command runs

    write_json(path, data)


def run(args: argparse.Namespace) -> int:
    from tfam.data import resolve_data
    from tfam.data.vision.preprocess import load_preprocess
    from tfam.training.evaluation import evaluate
    from tfam.viz import plot_confusion

    source = resolve_model(args.dir, what="DIR", kinds=("dir",))
    if run_is_seq2seq(source):
        return run_seq2seq(args)
    if getattr(source.model_class, "inputs", "") == "tokens":
        return run_text(args)
    if getattr(source.model_class, "inputs", "") == "audio":
        from tfam.cli.speech import run_eval

        return run_eval(args, source)
    if getattr(source.model_class, "inputs", "") == "graph":
        from tfam.cli.graphs import run_eval as run_graph_eval

        return run_graph_eval(args, source)
    if args.limit is not None:
        raise ValueError(
            "--limit is for seq2seq runs; an image run is evaluated on its whole split"
        )
    run_dir = Path(args.dir)
    if args.batch_size is None:
        args.batch_size = 256
    if args.batch_size < 1:
        raise ValueError(f"--batch-size {args.batch_size} is invalid: expected an int >= 1")
    device = device_from(args)
    pre = load_preprocess(run_dir)
    model = source.load(device)
    pre.check_model(model)
    name = args.data or pre.dataset
    if not name:
        raise ValueError("preprocess.json names no dataset: pass --data NAME_OR_DIR")
    entry = resolve_data(name, run=run_dir)
    _check_image_data(entry, run_dir, source)
    split = eval_split(args, entry)
    data = entry.load(split, root=args.root)
    size = data.image_size if isinstance(data.image_size, tuple) else (data.image_size,) * 2
    if data.in_channels != pre.in_channels or len(data.classes) != len(pre.classes):
        raise ValueError(
            f"--data {name}: {data.in_channels}-channel images in {len(data.classes)} classes, but "
            f"the model takes {pre.in_channels}-channel images in {len(pre.classes)} classes"
        )
    if tuple(size) != tuple(pre.image_size):
        raise ValueError(
            f"--data {name}: images are {size[0]}x{size[1]}, the model takes "
            f"{pre.image_size[0]}x{pre.image_size[1]}"
        )
    # Normalise exactly as the model was trained (preprocess.json), not with whatever
    # statistics the dataset object would compute for itself.
    data = data.with_stats(pre.mean, pre.std)
    result = evaluate(model, data, batch_size=args.batch_size, classes=pre.classes, device=device)

    print(f"model {run_dir} on {name} {split}: {result.num_examples} images")
    print(f"accuracy: {100 * result.accuracy:.2f}% ({result.correct}/{result.num_examples})")
    print(f"loss: {result.loss:.4f}")
    print()
    width = max(5, *(len(c) for c in result.classes))
    print(f"{'class':<{width}}  {'count':>6}  {'correct':>7}  {'accuracy':>8}")
    for cls, count, right, acc in zip(
        result.classes,
        result.class_counts.tolist(),
        result.class_correct.tolist(),
        result.per_class_accuracy.tolist(),
    ):
        shown = "-" if math.isnan(acc) else f"{100 * acc:.2f}%"
        print(f"{cls:<{width}}  {count:>6}  {right:>7}  {shown:>8}")
    confused = result.most_confused(3)
    if confused:
        print()
        print(
            "most confused (true -> predicted): "
            + ", ".join(f"{t} -> {p} ({n})" for t, p, n in confused)
        )

    out = Path(args.out) if args.out else run_dir / "confusion.png"
    plot_confusion(
        result.confusion,
        result.classes,
        out,
        title=f"Confusion matrix: {run_dir.name}, {name} {split}",
    )
    note_chance(result.accuracy, result.class_counts.tolist(), split)
    numbers = {"model_dir": str(run_dir), "dataset": name, "split": split, **result.to_dict()}
    numbers["confusion_png"] = str(out)
    _write_json(run_dir / "eval.json", numbers)
    print()
    print(f"confusion matrix: {out}")
    print(f"numbers: {run_dir / 'eval.json'}")
    return 0


def _check_image_data(entry: Any, run_dir: Path, source: Any) -> None:
    """An image classifier is evaluated on images: another task's data is one line naming the
    image data sets it accepts."""
    from tfam.data.catalog import get_dataset, list_datasets

    if entry.task == "image-classification":
        return
    images = [n for n in list_datasets() if get_dataset(n).task == "image-classification"]
    family = getattr(source.model_class, "__name__", "image model")
    raise ValueError(
        f"--data {entry.name} is a {entry.task} dataset, but {run_dir} is an image classifier "
        f"({family}): --data takes image data ({', '.join(images)}, or an image folder with "
        "one sub-folder per class)"
    )


# ---------------------------------------------------------------------------------------------
# Seq2seq runs


def _pairs(data: Any, name: str, split: str) -> list[tuple[str, str]]:
    pairs = getattr(data, "pairs", None)
    if pairs is None:
        raise ValueError(
            f"--data {name} {split} holds no text pairs (source, target): a seq2seq run is "
            "evaluated on a text-to-text dataset"
        )
    return [(str(a), str(b)) for a, b in pairs]


def run_seq2seq(args: argparse.Namespace) -> int:
    """Translate the held-out split and score it with sacreBLEU and chrF."""
    import sacrebleu

    from tfam.cli.text import check_decoding, translate_sources
    from tfam.data import resolve_data
    from tfam.runs import load_seq2seq, train_args

    run_dir = Path(args.dir)
    if args.batch_size is None:
        args.batch_size = 32
    check_decoding(args, max_positions=2**31)  # --beam 0 fails before any loading
    name = args.data or train_args(run_dir).get("data")
    if not name:
        raise ValueError(f"{run_dir}/train_args.json names no dataset: pass --data NAME")
    entry = resolve_data(name, run=run_dir)
    split = eval_split(args, entry)
    run = load_seq2seq(args.dir, device_from(args), "eval")
    check_decoding(args, run.max_positions)
    pairs = _pairs(entry.load(split, root=args.root), entry.name, split)
    total = len(pairs)
    if args.limit is not None:
        pairs = pairs[: args.limit]
    if not pairs:
        raise ValueError(f"{entry.name} {split} holds no sentences")
    # Held-out text is taken as it is: an overlong source is cut (and counted), not refused.
    limit = run.max_positions - 1  # room for <eos>
    sources, truncated = [], 0
    for src, _ in pairs:
        ids = list(run.tokenizer.encode(src))
        truncated += len(ids) > limit
        sources.append(ids[:limit] + [run.tokenizer.eos_id])
    shown = f"first {len(pairs)} of {total}" if len(pairs) < total else f"{total}"
    decoding = (
        "greedy" if args.beam == 1 else f"beam {args.beam}, length penalty {args.length_penalty:g}"
    )
    print(f"model {run_dir} on {entry.name} {split}: {shown} sentences, {decoding}", flush=True)
    hyps = translate_sources(run, sources, args)
    refs = [ref for _, ref in pairs]
    bleu_metric, chrf_metric = sacrebleu.BLEU(), sacrebleu.CHRF()
    bleu = bleu_metric.corpus_score(hyps, [refs])
    chrf = chrf_metric.corpus_score(hyps, [refs])
    print(f"BLEU: {bleu.score:.2f}  ({bleu_metric.get_signature()})")
    print(f"chrF: {chrf.score:.2f}  ({chrf_metric.get_signature()})")
    if truncated:
        print(f"note: {truncated} sources longer than {limit} tokens were truncated")
    examples = []
    print()
    print("examples:")
    for (src, ref), hyp in list(zip(pairs, hyps))[:EXAMPLES_SHOWN]:
        examples.append({"source": src, "reference": ref, "translation": hyp})
        print(f"  source:      {src}")
        print(f"  reference:   {ref}")
        print(f"  translation: {hyp}")
        print()

    out = Path(args.out) if args.out else run_dir / f"translations_{split}.txt"
    from tfam.fileio import atomic_write_bytes

    atomic_write_bytes(out, "".join(h.replace("\n", " ") + "\n" for h in hyps).encode())
    numbers = {
        "model_dir": str(run_dir),
        "dataset": entry.name,
        "split": split,
        "num_sentences": len(pairs),
        "split_size": total,
        "beam": args.beam,
        "length_penalty": args.length_penalty,
        "max_new_tokens": args.max_new_tokens,
        "bleu": bleu.score,
        "bleu_signature": str(bleu_metric.get_signature()),
        "bleu_detail": str(bleu),
        "chrf": chrf.score,
        "chrf_signature": str(chrf_metric.get_signature()),
        "truncated_sources": truncated,
        "examples": examples,
        "translations": str(out),
    }
    _write_json(run_dir / "eval.json", numbers)
    print(f"translations: {out}")
    print(f"numbers: {run_dir / 'eval.json'}")
    sys.stdout.flush()
    return 0


# ---------------------------------------------------------------------------------------------
# BERT and GPT runs


def run_text(args: argparse.Namespace) -> int:
    """The task's metrics of a BERT or GPT run on a split of its dataset (or --data)."""
    import torch

    from tfam.data import resolve_data
    from tfam.runs import family_class, read_config, run_task
    from tfam.training.batching import EVAL_BATCH_TOKENS, eval_index_batches
    from tfam.training.sanity import label_counts
    from tfam.training.tasks import IGNORE_INDEX, task_for

    run_dir = Path(args.dir)
    if args.batch_size is None:
        args.batch_size = 64
    if args.batch_size < 1:
        raise ValueError(f"--batch-size {args.batch_size} is invalid: expected an int >= 1")
    config = read_config(run_dir)
    trained = run_task(run_dir, config)
    name = args.data or trained.data
    if not name:
        raise ValueError(
            f"{run_dir} names no dataset (no labels.json or train_args.json): pass --data NAME"
        )
    entry = resolve_data(name, run=run_dir)
    if trained.task in entry.tasks and trained.task != entry.task:
        # Data with several objectives (images as pixels: next pixel, or classify): the run's.
        import dataclasses

        entry = dataclasses.replace(entry, task=trained.task)
    if trained.task and entry.task != trained.task:
        raise ValueError(
            f"--data {entry.name} is a {entry.task} dataset, but {run_dir} was trained for "
            f"{trained}: evaluate it on a {trained.task} dataset"
            + (f" (e.g. --data {trained.data})" if trained.data else "")
        )
    family_tasks = getattr(family_class(config.family), "tasks", ())
    if entry.task not in family_tasks:
        raise ValueError(
            f"--data {entry.name} is a {entry.task} dataset; a {config.family} model is "
            f"evaluated on {', '.join(family_tasks)}"
        )
    split = eval_split(args, entry)
    device = device_from(args)
    data = entry.load(split, root=args.root)
    _check_text_data(data, config, entry.name)
    model = resolve_model(args.dir, what="DIR", kinds=("dir",)).load(device).eval()
    task = task_for(entry.task, data)
    total = len(data)
    n = total if args.limit is None else min(args.limit, total)
    if n == 0:
        raise ValueError(f"{entry.name} {split} holds no examples")
    classes = list(getattr(data, "classes", ()) or ())
    per_class = entry.task == "sequence-classification" and classes
    counts = torch.zeros(len(classes), dtype=torch.long) if per_class else None
    right = torch.zeros(len(classes), dtype=torch.long) if per_class else None
    sums: dict[str, float] = {}
    # Sorted by length and bounded by padded tokens too: memory follows tokens (the sums,
    # and so the metrics, do not depend on how the examples are grouped).
    lengths = getattr(data, "lengths", None)
    batches = eval_index_batches(
        n, args.batch_size, None if lengths is None else lengths[:n], EVAL_BATCH_TOKENS
    )
    with torch.inference_mode():
        for idx in batches:
            batch = task.get_batch(data, idx)
            if batch is None:
                batch = task.collate([data[int(i)] for i in idx])
            batch = {k: v.to(device) for k, v in batch.items()}
            for key, value in task.eval_sums(model, batch).items():
                sums[key] = sums.get(key, 0.0) + float(value)
            if per_class:
                labels = batch["labels"].cpu()
                guess = task.predict(model, batch).argmax(dim=-1).cpu()
                kept = labels != IGNORE_INDEX
                counts += torch.bincount(labels[kept], minlength=len(classes))
                right += torch.bincount(labels[kept & (guess == labels)], minlength=len(classes))
    metrics = task.reduce(sums)
    unit = getattr(task, "unit", "examples")
    shown = f"first {n} of {total}" if n < total else f"{total}"
    print(f"model {run_dir} on {entry.name} {split}: {shown} {_plural(entry.task)}")
    counted = int(sums.get("count", 0))
    per = {"characters": "char"}.get(unit, unit.rstrip("s"))
    lines = _metric_lines(entry.task, metrics, sums, per, counted)
    for line in lines:
        print(line)
    if getattr(task, "primary_metric", None) == "acc":
        seen = counts.tolist() if counts is not None else label_counts(data)
        note_chance(metrics.get("acc", math.nan), seen, split)
    numbers: dict[str, Any] = {
        "model_dir": str(run_dir),
        "dataset": entry.name,
        "task": entry.task,
        "split": split,
        "num_examples": n,
        "split_size": total,
        "counted": counted,
        "unit": unit,
        **{k: (None if math.isnan(v) else v) for k, v in metrics.items()},
    }
    if per_class:
        assert counts is not None and right is not None
        print()
        width = max(5, *(len(c) for c in classes))
        print(f"{'class':<{width}}  {'count':>6}  {'correct':>7}  {'accuracy':>8}")
        table = []
        for c, k, r in zip(classes, counts.tolist(), right.tolist()):
            acc = f"{100 * r / k:.2f}%" if k else "-"
            print(f"{c:<{width}}  {k:>6}  {r:>7}  {acc:>8}")
            table.append({"class": c, "count": k, "correct": r})
        numbers["per_class"] = table
    _write_json(run_dir / "eval.json", numbers)
    print()
    print(f"numbers: {run_dir / 'eval.json'}")
    sys.stdout.flush()
    return 0


def _plural(task: str) -> str:
    return {
        "token-classification": "sentences",
        "sequence-classification": "sentences",
        "causal-lm": "windows",
    }.get(task, "examples")


def _metric_lines(
    task: str, metrics: dict[str, float], sums: dict[str, float], per: str, counted: int
) -> list[str]:
    """The printed lines of a text task's metrics."""
    lines = []
    loss = metrics.get("loss", math.nan)
    acc = metrics.get("acc")
    correct = int(sums.get("correct", 0))
    if task == "causal-lm":
        lines.append(f"loss: {loss:.4f} nats/{per} over {counted} predicted {per}s")
        if "bpc" in metrics:
            lines.append(f"bits per character: {metrics['bpc']:.4f}")
        if "ppl" in metrics:
            lines.append(f"perplexity: {metrics['ppl']:.2f}")
        if acc is not None:
            lines.append(f"next-{per} accuracy: {100 * acc:.2f}% ({correct}/{counted})")
        return lines
    what = {"token-classification": "words", "masked-lm": "masked tokens"}.get(task, "sentences")
    if acc is not None:
        lines.append(f"accuracy: {100 * acc:.2f}% ({correct}/{counted} {what})")
    lines.append(f"loss: {loss:.4f}")
    for key, value in metrics.items():
        if key not in ("loss", "acc"):
            lines.append(f"{key}: {value:.4f}")
    return lines


def _check_text_data(data: Any, config: Any, name: str) -> None:
    """The dataset's vocabulary and classes against the model's (one line each)."""
    vocab = getattr(data, "vocab_size", None)
    if vocab is not None and int(vocab) > int(config.vocab_size):
        raise ValueError(
            f"--data {name}: its tokenizer has {vocab} ids, but the model only "
            f"vocab_size={config.vocab_size}"
        )
    labels = getattr(data, "num_labels", None)
    if labels is not None and hasattr(config, "num_labels") and labels != config.num_labels:
        raise ValueError(
            f"--data {name} has {labels} classes, but the model has num_labels={config.num_labels}"
        )
