"""`tfam predict DIR IMAGE...`: the top-k classes of each image, with probabilities; for a BERT
sentence classifier the classes of each sentence, for a BERT tagger each word's tag; for a
seq2seq run the translation of each sentence, as `tfam translate`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tfam.cli.common import (
    RUN_DIR_HELP,
    add_command,
    add_device_option,
    add_image_options,
    device_from,
    image_options,
    resolve_model,
)
from tfam.config import BaseConfig
from tfam.runs import run_is_seq2seq

EPILOG = """examples:
  tfam predict runs/digits my_digit.png                 top 5 classes with probabilities
  tfam predict runs/digits a.png b.jpg --top-k 3
  tfam predict runs/digits test:0 test:1                samples of the run's dataset
  tfam predict runs/photos val:0 cat.jpg --device cuda  a model trained on an image folder
  tfam predict runs/kjv-rv "And God saw the light."     a seq2seq run: its translation
  tfam predict runs/sentiment "A fine, moving film."    a BERT sentence classifier: classes
  tfam predict runs/pos "Ali eve geldi ." --tags        a BERT tagger: one tag per word
  tfam predict runs/spoken-digits my_digits.wav         a speech run: its classes, transcript,
                                                        or the labelled segments with times
  tfam predict runs/nci-tpsa "CCO" "c1ccccc1O"          a graph run on molecules: each value
  tfam predict runs/karate 5 16 24                      a run over one graph: nodes by index

Text runs need the tokenizer.json and labels.json (class names) that `tfam train` writes. A
tagger splits the sentence into words as BERT does (at spaces and punctuation) and gives each
word the tag predicted on its first word piece.

Images are converted as the model needs (grayscale/RGB, resized, scaled as in training).
For digits-like data (one channel, light on dark), an image with a bright border (ink on
paper) is inverted and its contrast stretched; --invert yes|no and --no-stretch override.
"""

HELP = "top-k classes of images or sentences, tags of words, translations, molecules' values"
DESCRIPTION = (
    "Classify image files (PNG, JPEG, ... via Pillow) or sentences, tag words, or translate "
    "sentences with a trained model."
)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = add_command(subparsers, "predict", HELP, DESCRIPTION, EPILOG, run_dir=RUN_DIR_HELP)
    p.add_argument(
        "images",
        metavar="IMAGE",
        nargs="+",
        help="image file, or SPLIT:INDEX (e.g. test:0) for a sample of the run's dataset; for a "
        "text run, a sentence; for a graph run, a SMILES (molecules) or a node index",
    )
    p.add_argument(
        "--top-k",
        type=int,
        default=5,
        help="classes to list per image or sentence (default: 5)",
    )
    p.add_argument(
        "--tags",
        action="store_true",
        help="text runs: ask for one tag per word (a token-classification run, a tagger)",
    )
    add_image_options(p)
    add_device_option(p)
    p.set_defaults(func=run, trailing="images")


def run(args: argparse.Namespace) -> int:
    import torch

    from tfam.data.vision.preprocess import load_input, load_preprocess

    if args.top_k < 1:
        raise ValueError(f"--top-k {args.top_k} is invalid: expected an int >= 1")
    source = resolve_model(args.dir, what="DIR", kinds=("dir",))
    if run_is_seq2seq(source):
        if args.tags:
            raise ValueError(f"--tags is for a tagger; {args.dir} holds a seq2seq run")
        return _translate(args)
    if getattr(source.model_class, "inputs", "") == "tokens":
        return predict_text(args)
    if getattr(source.model_class, "inputs", "") == "audio":
        return predict_audio(args, source)
    if getattr(source.model_class, "inputs", "") == "graph":
        if args.tags:
            raise ValueError(f"--tags is for a tagger; {args.dir} holds a graph model")
        return predict_graph(args)
    if args.tags:
        raise ValueError(f"--tags is for a tagger; {args.dir} holds an image classifier")
    device = device_from(args)
    pre = load_preprocess(Path(args.dir))
    # Read every image before any output: a bad file fails the command up front.
    inputs = [load_input(spec, pre, **image_options(args)) for spec in args.images]
    model = source.load(device)
    pre.check_model(model)
    with torch.inference_mode():
        x = torch.stack([i.tensor for i in inputs]).to(device)
        probs = model(x).float().softmax(dim=-1).cpu()
    k = min(args.top_k, probs.shape[-1])
    values, indices = probs.topk(k, dim=-1)  # sorted, largest first
    width = max(len(c) for c in pre.classes)
    for n, (item, vals, idx) in enumerate(zip(inputs, values.tolist(), indices.tolist())):
        notes = []
        if item.inverted:
            notes.append("inverted: bright background")
        if item.stretched:
            notes.append("contrast stretched")
        if item.label is not None:
            notes.append(f"true class {pre.classes[item.label]}")
        print(item.name + (f"  ({', '.join(notes)})" if notes else ""))
        for rank, (p, c) in enumerate(zip(vals, idx), start=1):
            print(f"  {rank}. {pre.classes[c]:<{width}}  {p:.4f}")
        if n + 1 < len(inputs):
            print()
    return 0


def _segments(labels: Sequence[str], min_frames: int = 3) -> list[tuple[float, float, str]]:
    """Frame labels (one per 10 ms frame) -> (start s, end s, label) runs of one label, runs
    shorter than ``min_frames`` merged into the run before them (a label flickering for a
    frame or two is noise, not a word), silence left out."""
    runs: list[list[Any]] = []
    for t, label in enumerate(labels):
        if runs and runs[-1][2] == label:
            runs[-1][1] = t + 1
        else:
            runs.append([t, t + 1, label])
    merged: list[list[Any]] = []
    for run in runs:
        if merged and (run[1] - run[0] < min_frames or merged[-1][2] == run[2]):
            merged[-1][1] = run[1]
        else:
            merged.append(run)
    # Frame t covers [10 t, 10 t + 25) ms and is labelled at its centre, 10 t + 12.5 ms (as
    # the corpus labels frames), so it stands for the 10 ms around it: a run of frames a..b-1
    # spans 10 a + 7.5 .. 10 b + 7.5 ms, and segments that follow each other do not overlap.
    edge = lambda t: 0.0 if t == 0 else t / 100 + 0.0075  # noqa: E731
    return [(edge(a), edge(b), lab) for a, b, lab in merged if lab != "sil"]


def predict_audio(args: argparse.Namespace, source: Any) -> int:
    """A speech run: for each WAV file its top classes (utterance labels), its transcript
    (CTC) or its labelled segments with times (frame labels); a file that is not audio, or
    is empty or silent, is one error line naming it (read before any output)."""
    import torch

    from tfam.cli.speech import run_recordings, speech_meta
    from tfam.training.tasks.ctc import ctc_greedy

    meta = speech_meta(Path(args.dir))
    # WAV files or SPLIT:INDEX samples, every one read (and checked) before any output.
    recordings = run_recordings(Path(args.dir), args.images, meta)
    features = [r.features for r in recordings]
    device = device_from(args)
    model = source.load(device).eval()
    head = model.config.head
    for n, (rec, x) in enumerate(zip(recordings, features, strict=True)):
        spec = rec.name + (f"  [{', '.join(rec.notes)}]" if rec.notes else "")
        with torch.inference_mode():
            out = model(x[None].to(device)).float().cpu()[0]
        seconds = x.shape[0] / 100
        if rec.truth is not None:
            spec += f"  true: {rec.truth!r}" if head == "ctc" else f"  true: {rec.truth}"
        if head == "utterance":
            classes = meta["classes"]
            probs = out.softmax(dim=-1)
            values, indices = probs.topk(min(args.top_k, probs.shape[-1]))
            width = max(len(c) for c in classes)
            print(f"{spec}  ({seconds:.2f} s)")
            for rank, (p, c) in enumerate(zip(values.tolist(), indices.tolist()), start=1):
                print(f"  {rank}. {classes[c]:<{width}}  {p:.4f}")
        elif head == "ctc":
            alphabet, sep = meta["alphabet"], meta.get("separator", "")
            lengths = model.config.output_lengths(torch.tensor([x.shape[0]]))
            ids = ctc_greedy(out[None], lengths)[0]
            print(f"{spec}  ({seconds:.2f} s): {sep.join(alphabet[i - 1] for i in ids)!r}")
        else:
            classes = meta["classes"]
            labels = [classes[i] for i in out[: x.shape[0]].argmax(dim=-1).tolist()]
            segments = _segments(labels)
            kind = meta.get("labels") or "label"
            print(f"{spec}  ({seconds:.2f} s): {len(segments)} {kind} segments")
            print(f"  in order: {' '.join(label for _, _, label in segments) or '(silence)'}")
            for start, end, label in segments:
                print(f"  {start:6.2f} - {end:6.2f} s  {label}")
        if n + 1 < len(features):
            print()
    return 0


def _translate(args: argparse.Namespace) -> int:
    """A seq2seq run: each argument translated with translate's default decoding."""
    from tfam.cli import translate
    from tfam.cli.text import add_decoding_options

    parser = argparse.ArgumentParser(add_help=False)
    add_decoding_options(parser)
    defaults = parser.parse_args([])
    for name, value in vars(defaults).items():
        setattr(args, name, value)
    args.texts = list(args.images)
    return translate.run(args)


# ---------------------------------------------------------------------------------------------
# Text runs


def split_words(text: str) -> list[str]:
    """BERT's word split: at whitespace and around every punctuation character ("Ali geldi."
    -> ["Ali", "geldi", "."]), as the treebanks and BERT's basic tokenizer split."""
    from tokenizers.pre_tokenizers import BertPreTokenizer

    return [word for word, _ in BertPreTokenizer().pre_tokenize_str(text)]


def predict_text(args: argparse.Namespace) -> int:
    """A BERT classification run: the classes of each sentence, or the tag of each word."""
    import torch

    from tfam.cli.common import read_texts
    from tfam.runs import (
        describe_run,
        family_class,
        load_labels,
        load_run_tokenizer,
        read_config,
        run_task,
    )

    run_dir = Path(args.dir)
    texts, names = read_texts(args.images, "predict", "a sentence")
    config = read_config(run_dir)
    cls = family_class(config.family)
    trained = run_task(run_dir, config)
    wanted = "token-classification" if args.tags else None
    text_classes = ("sequence-classification", "token-classification")
    if getattr(cls, "image_tokens", False):
        completes = cls.head_task(config) == "causal-lm"
        raise ValueError(
            f"DIR {args.dir!r} is invalid for predict: it holds "
            f"{describe_run(run_dir, config.family)}, a model over palette ids, which reads no "
            "image files; predict takes an image classifier or a BERT classifier; "
            f"`tfam eval {args.dir}` scores it on its data's held-out images"
            + (f", `tfam generate {args.dir}` completes them" if completes else "")
        )
    if trained.task not in text_classes or trained.task not in getattr(cls, "tasks", ()):
        hint = (
            f"; to continue text with it: tfam generate {args.dir} --prompt TEXT"
            if getattr(cls, "generates", False)
            else f"; for sentence embeddings: tfam embed {args.dir} TEXT"
            if getattr(cls, "embeds", False)
            else ""
        )
        raise ValueError(
            f"predict on text needs a BERT classification run (e.g. `tfam train bert --task "
            f"sentiment` or `--task pos`), but {run_dir} holds "
            f"{describe_run(run_dir, config.family)}{hint}"
        )
    labels = load_labels(run_dir, "predict")
    classes = list(labels["classes"])
    if wanted is not None and trained.task != wanted:
        raise ValueError(
            f"--tags needs a token-classification run (a tagger, e.g. `tfam train bert --task "
            f"pos`), but {run_dir} was trained for {trained} (classes: {', '.join(classes)}): "
            "leave out --tags for its sentence classes"
        )
    if len(classes) != config.num_labels:
        raise ValueError(
            f"{run_dir / 'labels.json'} names {len(classes)} classes but the model has "
            f"num_labels={config.num_labels}: the labels are not the model's"
        )
    tokenizer = load_run_tokenizer(run_dir, "predict (sentences to token ids)")
    device = device_from(args)
    model = resolve_model(args.dir, what="DIR", kinds=("dir",)).load(device).eval()
    # Only a learned position table bounds the length (config.check_length).
    limit = model.config
    with torch.inference_mode():
        if trained.task == "token-classification":
            _print_tags(model, tokenizer, texts, names, classes, limit, device)
        else:
            _print_classes(model, tokenizer, texts, names, classes, limit, device, args.top_k)
    return 0


def _check_length(n: int, limit: BaseConfig, name: str) -> None:
    """One line when ``name``'s ``n`` tokens pass a learned table's ``max_positions``."""
    limit.check_length(n, name)


def _print_classes(model, tokenizer, texts, names, classes, limit, device, top_k) -> None:  # noqa: ANN001
    import torch

    rows = [list(tokenizer.encode(t)) for t in texts]
    cut = getattr(tokenizer, "max_length", None)
    for row, name in zip(rows, names):
        _check_length(len(row), limit, name)
        if cut is not None and len(row) >= cut:
            from tfam.cli.text import note

            note(f"{name} fills the tokenizer's {cut} tokens: the rest is cut, as in training")
    k = min(top_k, len(classes))
    width = max(len(c) for c in classes)
    for n, (text, row) in enumerate(zip(texts, rows)):
        ids = torch.tensor([row], dtype=torch.long, device=device)
        mask = torch.ones_like(ids, dtype=torch.bool)
        probs = model(ids, attention_mask=mask).float().softmax(dim=-1)[0].cpu()
        values, indices = probs.topk(k)
        print(text)
        for rank, (p, c) in enumerate(zip(values.tolist(), indices.tolist()), start=1):
            print(f"  {rank}. {classes[c]:<{width}}  {p:.4f}")
        if n + 1 < len(texts):
            print()


def _print_tags(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    names: Sequence[str],
    classes: Sequence[str],
    limit: BaseConfig,
    device: Any,
) -> None:
    """Each sentence, then one line per word: the word, its tag (from its first piece) and the
    tag's probability."""
    import torch

    encode_words = getattr(tokenizer, "encode_words", None)
    if encode_words is None:
        raise ValueError(
            f"the run's tokenizer ({type(tokenizer).__name__}) cannot encode words with word "
            "indices; a tagger needs a WordPiece tokenizer"
        )
    for n, (text, name) in enumerate(zip(texts, names)):
        words = split_words(text)
        if not words:
            raise ValueError(f"{name} holds no words: expected a sentence to tag")
        ids, word_ids = encode_words(words)
        _check_length(len(ids), limit, name)
        first: dict[int, int] = {}
        for pos, w in enumerate(word_ids):
            if w is not None and w not in first:
                first[w] = pos
        if len(first) < len(words):
            raise ValueError(
                f"{name} is too long: only its first {len(first)} of {len(words)} words fit in "
                f"the tokenizer's {getattr(tokenizer, 'max_length', len(ids))} tokens"
            )
        x = torch.tensor([ids], dtype=torch.long, device=device)
        probs = model(x, attention_mask=torch.ones_like(x, dtype=torch.bool)).float()
        probs = probs.softmax(dim=-1)[0].cpu()
        width = max(len(w) for w in words)
        print(text)
        for w, word in enumerate(words):
            p, c = probs[first[w]].max(dim=-1)
            print(f"  {word:<{width}}  {classes[int(c)]:<6}  {float(p):.4f}")
        if n + 1 < len(texts):
            print()


# ---------------------------------------------------------------------------------------------
# Graph runs


def predict_graph(args: argparse.Namespace) -> int:
    """A graph run: for molecules (SMILES) each one's value in the data's unit or its classes;
    for a run over one graph, each node's class (and what the data says of it)."""
    from tfam.cli.graphs import forward, load_graph_run, molecules, node_indices, run_graph

    run = load_graph_run(args.dir, device_from(args), "predict")
    head, classes = run.facts.get("head"), list(run.facts.get("classes") or [])
    if run.reads_smiles:
        graphs = molecules(args.images)  # every SMILES read before any output
        out = forward(run, graphs).float().cpu()
        if head == "value":
            unit = str(run.facts.get("unit") or "")
            width = max(len(g.name) for g in graphs)
            for g, value in zip(graphs, out.tolist(), strict=True):
                print(f"{g.name:<{width}}  {value:.2f}{' ' + unit if unit else ''}")
            return 0
        _print_graph_classes([g.name for g in graphs], out.softmax(dim=-1), classes, args.top_k)
        return 0
    graph, known = run_graph(run)
    nodes = node_indices(args.images, graph)
    probs = forward(run, [graph])[0].float().softmax(dim=-1).cpu()
    trained = graph.node_labels
    width = max(len(c) for c in classes)
    for i in nodes:
        p, c = probs[i].max(dim=-1)
        note = ""
        if int(trained[i]) >= 0:
            note = f"  (labelled in training: {classes[int(trained[i])]})"
        elif int(known[i]) >= 0:
            note = f"  (the data says {classes[int(known[i])]})"
        print(f"node {i}: {classes[int(c)]:<{width}}  {float(p):.4f}{note}")
    return 0


def _print_graph_classes(
    names: Sequence[str], probs: Any, classes: Sequence[str], top_k: int
) -> None:
    k = min(top_k, len(classes))
    width = max(len(c) for c in classes)
    values, indices = probs.topk(k, dim=-1)
    for n, (name, vals, idx) in enumerate(zip(names, values.tolist(), indices.tolist())):
        print(name)
        for rank, (p, c) in enumerate(zip(vals, idx), start=1):
            print(f"  {rank}. {classes[c]:<{width}}  {p:.4f}")
        if n + 1 < len(names):
            print()
