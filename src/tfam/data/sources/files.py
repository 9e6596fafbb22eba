"""The user's own text files as tfam datasets: splits, a tokenizer, the facts a model needs.

    data = load_user_text("reviews.csv", task="sequence-classification")
    data.task                       # the task it was read for (default: what the content says)
    data.splits["train"]            # a TextClassDataset (ids, labels), as the catalog's datasets
    data.info                       # TextDatasetInfo: vocab_size, classes, max_length, sizes, ...
    data.tokenizer                  # trained on the training text (or the one given)

Which dataset each task gets (the same kinds the trainer, eval, predict, translate and generate
already read; the new ones, and the tokenizer trainers, are in
:mod:`tfam.data.sources.textsets`): sequence classification -> :class:`TextClassDataset` ([CLS] text [SEP], or
[CLS] a [SEP] b [SEP] for sentence pairs); tagging ->
:class:`~tfam.data.sources.treebank.TaggingDataset` (the tag on each word's first piece);
masked-LM -> :class:`TextLines` ([CLS] line [SEP], masked by the masked-lm task: 15%, 80/10/10);
causal LM -> :class:`TokenWindows` (the text's ids in windows of ``context + 1``, stride
``context``, as :class:`~tfam.data.sources.charlm.CharWindows`); translation ->
:class:`~tfam.data.sources.seq2seq.Seq2SeqDataset`.

Validation and test come from the files given (``val``, ``test``); without ``val`` 10% of the
training file's examples (at least one; per class for a classifier) are held out, chosen with
a fixed seed, so every run and ``tfam eval`` see the same split. Without a test file there is no test split.

The tokenizer, unless one is given (a pretrained start such as ``minilm_l6``, or a run's
``tokenizer.json``), is trained on the training split's text with the ``tokenizers`` library:
WordPiece (BERT's, lower-cased) for the BERT tasks, byte-level BPE for causal LM and
translation; its vocabulary target is ``min(16000, 300 + distinct words)`` (the trainer stops
earlier when no pair of pieces occurs twice), so a small file gets a small vocabulary.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfam.data.sources.seq2seq import Seq2SeqDataset
from tfam.data.sources.textfiles import TextFile, read_user_text
from tfam.data.sources.textsets import (
    MAX_VOCAB,
    MIN_VOCAB,
    TextClassDataset,
    TextLines,
    TokenWindows,
    given_tokenizer,
    train_byte_bpe,
    train_wordpiece,
    vocab_target,
)
from tfam.data.sources.treebank import ConlluSentence, TaggingDataset
from tfam.data.text.dataset import TextDatasetInfo
from tfam.data.text.tokenizer import Tokenizer
from tfam.data.text.wordpiece import WordPieceTokenizer

__all__ = [
    "FILE_TASKS",
    "GPT_CONTEXT",
    "HOLDOUT_FRACTION",
    "HOLDOUT_SEED",
    "OBJECTIVES",
    "TextClassDataset",
    "TextLines",
    "TokenWindows",
    "UserText",
    "load_user_text",
    "train_byte_bpe",
    "train_wordpiece",
    "vocab_target",
]

# What each kind of content can be trained for, the default first (a family that cannot learn
# the first gets the next it can).
FILE_TASKS = {
    "classify": ("sequence-classification", "masked-lm"),
    "tag": ("token-classification",),
    "translate": ("seq2seq",),
    "text": ("causal-lm", "masked-lm"),
}
# --task's short names (the tasks' ``objective``), spelled here: data imports no training code.
OBJECTIVES = {
    "classify": "sequence-classification",
    "tag": "token-classification",
    "mlm": "masked-lm",
    "clm": "causal-lm",
    "translate": "seq2seq",
}
_HEADS = {
    "sequence-classification": "sequence",
    "token-classification": "token",
    "masked-lm": "mlm",
}
_WORDPIECE_TASKS = frozenset(_HEADS)
_WHAT = {
    "classify": "labelled texts",
    "tag": "tagged sentences",
    "translate": "translation pairs",
    "text": "lines of text",
}
HOLDOUT_FRACTION = 0.1
HOLDOUT_SEED = 0
GPT_CONTEXT = 128  # tokens per causal-LM window, unless the text is too short for it


# -- reading, splitting, encoding -------------------------------------------------------------
@dataclass
class UserText:
    """The user's files read for one task: ``splits`` (train, val, and test when a test file
    was given) as datasets, ``info``, ``tokenizer`` and ``task``."""

    path: Path
    task: str
    info: TextDatasetInfo
    tokenizer: Tokenizer
    splits: dict[str, Any]


def _task(kind: str, path: Path, task: str | None, family_tasks: Sequence[str] | None) -> str:
    allowed = FILE_TASKS[kind]
    if task is not None:
        full = OBJECTIVES.get(task, task)
        if full not in allowed:
            short = {v: k for k, v in OBJECTIVES.items()}
            shown = ", ".join(short[t] for t in allowed)
            raise ValueError(
                f"--task {task!r} is invalid for --data {path} ({_WHAT[kind]}): expected one of "
                f"{shown}"
            )
        return full
    if family_tasks is not None:
        fits = [t for t in allowed if t in family_tasks]
        return fits[0] if fits else allowed[0]  # the caller refuses the family, naming it
    return allowed[0]


def _holdout(n: int, path: Path, groups: Sequence[str] = ()) -> tuple[list[int], list[int]]:
    """(kept, held-out) positions: 10% (at least one) drawn with a fixed seed; per class when
    ``groups`` (the labels) are given, so validation has every class that has two examples."""
    if n < 2:
        raise ValueError(
            f"{path} holds {n} example: expected at least 2 (one is held out for validation), "
            "or give --val FILE"
        )
    rng = random.Random(HOLDOUT_SEED)
    members: dict[str, list[int]] = {}
    for i, group in enumerate(groups or [""] * n):
        members.setdefault(group, []).append(i)
    held: list[int] = []
    for group in sorted(members):
        rows = members[group]
        k = max(1, round(HOLDOUT_FRACTION * len(rows))) if len(rows) >= 2 else 0
        held += rng.sample(rows, k)
    chosen = set(held)
    return [i for i in range(n) if i not in chosen], sorted(held)


def _subset(tf: TextFile, index: Sequence[int]) -> TextFile:
    pick = lambda xs: [xs[i] for i in index] if xs else []  # noqa: E731
    return TextFile(
        tf.path,
        tf.kind,
        texts=pick(tf.texts),
        labels=pick(tf.labels),
        words=pick(tf.words),
        tags=pick(tf.tags),
        pairs=pick(tf.pairs),
        columns=tf.columns,
    )


def _texts_of(tf: TextFile) -> list[str]:
    """Every text a tokenizer learns from."""
    if tf.kind == "translate":
        return [s for s, _ in tf.pairs] + [t for _, t in tf.pairs]
    if tf.kind == "tag":
        return [" ".join(w) for w in tf.words]
    return [t for x in tf.texts for t in ((x,) if isinstance(x, str) else x)]


def _sorted_classes(labels: set[str]) -> list[str]:
    if all(s.lstrip("-").isdigit() for s in labels):
        return sorted(labels, key=int)
    return sorted(labels)


def load_user_text(
    path: str | os.PathLike,
    *,
    task: str | None = None,
    family_tasks: Sequence[str] | None = None,
    text_column: str | None = None,
    label_column: str | None = None,
    val: str | os.PathLike | None = None,
    test: str | os.PathLike | None = None,
    source_lang: str | None = None,
    target_lang: str | None = None,
    tokenizer: Any = None,
) -> UserText:
    """Read, split, tokenize and encode the user's text files (see the module). ``task``: a
    task name or its short name (classify, tag, mlm, clm, translate), default the content's
    first that ``family_tasks`` (a family's ``tasks``) allows; ``tokenizer``: see
    :func:`given_tokenizer` (None: trained)."""
    columns = dict(
        text_column=text_column,
        label_column=label_column,
        source_lang=source_lang,
        target_lang=target_lang,
    )
    path = Path(path).expanduser().resolve()
    whole = read_user_text(path, **columns)
    chosen = _task(whole.kind, path, task, family_tasks)
    files = {"train": whole}
    for split, extra in (("val", val), ("test", test)):
        if extra is not None:
            other = read_user_text(Path(extra).expanduser(), **columns)
            if other.kind != whole.kind:
                raise ValueError(
                    f"--{split} {extra} holds {_WHAT[other.kind]}, but --data {path} holds "
                    f"{_WHAT[whole.kind]}: expected the same kind of file"
                )
            files[split] = other
    held = ""
    if val is None:
        groups = whole.labels if whole.kind == "classify" else ()
        fit, held_out = _holdout(len(whole), path, groups)
        files["train"], files["val"] = _subset(whole, fit), _subset(whole, held_out)
        per = " of each class" if groups else ""
        held = f"{HOLDOUT_FRACTION:.0%}{per} held out with seed {HOLDOUT_SEED}"

    classes: list[str] = []
    if chosen == "sequence-classification":
        found = set(whole.labels)
        if len(found) < 2:
            raise ValueError(
                f"{path}: every example has the label {whole.labels[0]!r} (label column "
                f"{whole.columns['label column']!r}): a classifier needs at least 2 classes"
            )
        classes = _sorted_classes(found)
        for split, tf in files.items():
            unknown = sorted(set(tf.labels) - found)
            if unknown:
                raise ValueError(
                    f"--{split} {tf.path} has labels that --data {path} has not: "
                    f"{', '.join(map(repr, unknown[:5]))}"
                )
    elif chosen == "token-classification":
        classes = sorted({t for tf in files.values() for tags in tf.tags for t in tags})

    tok = given_tokenizer(tokenizer)
    train_texts = _texts_of(files["train"])
    target, words = vocab_target(train_texts)
    if tok is None:
        if chosen in _WORDPIECE_TASKS:
            tok = train_wordpiece(train_texts, target)
            kind = "WordPiece"
        else:
            tok = train_byte_bpe(train_texts, target)
            kind = "byte-level BPE"
        tok_text = (
            f"{kind} trained on the training text: {tok.vocab_size:,} ids (target "
            f"min({MAX_VOCAB}, {MIN_VOCAB} + {words:,} distinct words))"
        )
    else:
        tok_text = f"the given {type(tok).__name__} ({tok.vocab_size:,} ids)"
    if chosen not in _WORDPIECE_TASKS and isinstance(tok, WordPieceTokenizer):
        # BERT's tokenizer adds [CLS]/[SEP] and cuts every text at its max_length.
        raise ValueError(
            f"task {chosen} needs a tokenizer of plain text (BPE, characters), but the given one "
            "is BERT's WordPiece: start from a GPT or encoder-decoder run, or from no --init"
        )
    if chosen in _WORDPIECE_TASKS and not isinstance(tok, WordPieceTokenizer):
        raise ValueError(
            f"task {chosen} needs a WordPiece tokenizer (BERT's), but the given one is a "
            f"{type(tok).__name__}"
        )

    name = str(path)
    splits: dict[str, Any] = {}
    context = None
    for split, tf in files.items():
        label = f"{path.name}:{split}"
        if chosen == "sequence-classification":
            ids = {c: i for i, c in enumerate(classes)}
            labels = [ids[y] for y in tf.labels]
            splits[split] = TextClassDataset(tf.texts, labels, tok, classes, name=label)
        elif chosen == "token-classification":
            sentences = [
                ConlluSentence(f"{label}:{i}", tuple(w), tuple(t))
                for i, (w, t) in enumerate(zip(tf.words, tf.tags))
            ]
            splits[split] = TaggingDataset(sentences, tok, classes, name=label)
        elif chosen == "masked-lm":
            texts = [x if isinstance(x, str) else " ".join(x) for x in tf.texts]
            splits[split] = TextLines(texts, tok, name=label)
        elif chosen == "seq2seq":
            splits[split] = Seq2SeqDataset(tf.pairs, tok, name=label)
        else:
            splits[split] = TokenWindows(tf.texts, tok, context=GPT_CONTEXT, name=label)
    if chosen == "causal-lm":
        # The window: GPT_CONTEXT tokens, or less when a split has too few for one window.
        counts = {s: len(ds.ids) for s, ds in splits.items()}
        context = min(GPT_CONTEXT, counts["train"] // 4, *(n - 1 for n in counts.values()))
        if context < 2:
            raise ValueError(
                f"{path} has too little text for a language model: {counts} tokens per split; "
                "expected at least 8 in training and 3 in each other split"
            )
        for ds in splits.values():
            ds.context = context
    empty = [s for s, ds in splits.items() if len(ds) == 0]
    if empty:
        raise ValueError(f"{path}: the {empty[0]} split holds no examples")

    # The longest example of any split: a model sized from the data must take every one.
    max_length = context if context is not None else max(max(ds.lengths) for ds in splits.values())
    sizes = {s: len(ds) for s, ds in splits.items()}
    parts = [f"train {sizes['train']}", f"val {sizes['val']} ({held or 'from ' + str(val)})"]
    if "test" in sizes:
        parts.append(f"test {sizes['test']} (from {test})")
    unit = f"windows of {context} tokens" if context else "examples"
    description = (
        f"{path.name}: {len(whole)} {_WHAT[whole.kind]} ({whole.used()}); {', '.join(parts)} "
        f"{unit}; tokenizer: {tok_text}; longest {max_length} ids"
    )
    info = TextDatasetInfo(
        name=name,
        vocab_size=tok.vocab_size,
        train_size=sizes["train"],
        val_size=sizes["val"],
        test_size=sizes.get("test", 0),
        description=description,
        pad_token_id=tok.pad_id,
        bos_token_id=tok.bos_id,
        eos_token_id=tok.eos_id,
        classes=tuple(classes),
        num_labels=len(classes) or None,
        head=_HEADS.get(chosen),
        max_length=max_length,
    )
    return UserText(path, chosen, info, tok, splits)
