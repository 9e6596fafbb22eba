"""Part-of-speech tagging: the Turkish Web Treebank (Google Research, PyPI ``turkish-treebanks``),
read from its CoNLL-U files.

    train = load_turkish_pos("train")   # TaggingDataset, 3,881 sentences
    ids, labels = train[0]              # [CLS] pieces [SEP] (L,); tag ids on first pieces, -100 else
    train.words[0], train.tags[0]       # the sentence's words and their tags
    train.classes                       # the 14 coarse tags, fixed order (TREEBANK_TAGS)

The wheel ``turkish-treebanks==1.0.0`` installs two CoNLL-U files, ``data/web.conllu`` (2,541
sentences from forums, blogs and other web text) and ``data/wiki.conllu`` (2,310 from Wikipedia),
at the top of site-packages; :func:`treebank_files` finds them from the distribution's file
list (``importlib.metadata``) without importing the package (its reader needs protobuf, tfam's
does not). ``make install`` installs it (pyproject's dev extra).

The split is the treebank's own, as its reader defines it: within each file, sentence number
``i`` (from 0, in file order) is test when ``i % 10 == 9``, dev ("val" here) when ``i % 10 == 8``
and train otherwise. Sizes: train 3,881 sentences / 64,707 tokens, val 485 / 8,638, test 485 /
8,025.

Tokens are the treebank's: it splits a word into its inflectional groups (``Açıklanmayan`` is
``Açık la nma yan``, joined by ``SpaceAfter=No``), each with its own tag, and a tagger here
tags those tokens. The label is the coarse tag (CoNLL-U column 4: the Universal tag set of
Petrov et al. (2012) with this treebank's AFFIX and ONOM, 14 tags); multiword-token lines (ids
like ``3-4``) and empty nodes (``3.1``) are skipped (this release has none). Each token is cut
into WordPieces by the packaged MiniLM's uncased vocabulary (lower-cased, accents stripped:
``müfredata`` -> ``mufredata``); its tag sits on its first piece, -100 on [CLS], [SEP] and the
other pieces. Sentences longer than ``max_length`` (128) pieces are truncated: their last
tokens get no piece and no label (41 sentences: 33 train, 6 val, 2 test, leaving 270, 76 and
17 tokens unlabeled; ``truncated`` and ``dropped_tokens`` count them).
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from tfam.data.sources.lines import read_lines
from tfam.data.text.dataset import TextDatasetInfo, TokenDataset, check_text_split
from tfam.data.text.wordpiece import MINILM_VOCAB_SIZE, WordPieceTokenizer, minilm_tokenizer

__all__ = [
    "IGNORE_INDEX",
    "TREEBANK_FILES",
    "TREEBANK_INSTALL",
    "TREEBANK_TAGS",
    "TURKISH_POS_INFO",
    "ConlluSentence",
    "TaggingDataset",
    "load_turkish_pos",
    "read_conllu",
    "treebank_files",
    "treebank_sentences",
    "treebank_split",
]

IGNORE_INDEX = -100  # a label the loss skips: [CLS], [SEP], continuation pieces, padding
TREEBANK_DIST = "turkish-treebanks"
TREEBANK_INSTALL = "pip install turkish-treebanks==1.0.0 (or: make install)"
TREEBANK_FILES = ("data/web.conllu", "data/wiki.conllu")  # in split order, as the reader's
# The coarse tags of the treebank (CoNLL-U column 4), in the fixed order of the class ids.
TREEBANK_TAGS = (
    "ADJ",
    "ADP",
    "ADV",
    "AFFIX",
    "CONJ",
    "DET",
    "NOUN",
    "NUM",
    "ONOM",
    "PRON",
    "PRT",
    "PUNCT",
    "VERB",
    "X",
)
POS_MAX_LENGTH = 128
# Sentences and tokens per split: the catalog's facts, loading nothing (checked by the tests).
TURKISH_POS_SIZES: dict[str, tuple[int, int]] = {
    "train": (3881, 64707),
    "val": (485, 8638),
    "test": (485, 8025),
}

TURKISH_POS_INFO = TextDatasetInfo.of_splits(
    "turkish-pos",
    MINILM_VOCAB_SIZE,
    {split: sentences for split, (sentences, _) in TURKISH_POS_SIZES.items()},
    classes=TREEBANK_TAGS,
    head="token",
    description=(
        "Turkish Web Treebank (PyPI turkish-treebanks; web and Wikipedia text), coarse POS tags "
        f"({len(TREEBANK_TAGS)}); the treebank's own split: "
        + ", ".join(f"{s} {n} sentences / {t} tokens" for s, (n, t) in TURKISH_POS_SIZES.items())
        + f"; MiniLM WordPiece, tag on each token's first piece, at most {POS_MAX_LENGTH} ids"
    ),
)


@dataclass(frozen=True)
class ConlluSentence:
    """A CoNLL-U sentence: its ``sent_id`` comment, its words (FORM) and their UPOS tags, and
    where it starts (``FILE:LINE`` of its first word line, for error messages)."""

    sent_id: str
    words: tuple[str, ...]
    tags: tuple[str, ...]
    source: str = field(default="", compare=False)


def read_conllu(path: str | os.PathLike) -> list[ConlluSentence]:
    """The sentences of a CoNLL-U file in file order (FORM and UPOS of each word line;
    multiword-token ranges ``3-4`` and empty nodes ``3.1`` skipped); ValueError naming the file
    and line of a malformed one (a wrong field count, an ID that is not a number, a byte that
    is not UTF-8)."""
    path = Path(path)
    out: list[ConlluSentence] = []
    sent_id, words, tags, first = "", [], [], 0

    def finish() -> None:
        nonlocal sent_id, words, tags
        if words:
            name = sent_id or f"{path.name}:{len(out)}"
            out.append(ConlluSentence(name, tuple(words), tuple(tags), f"{path}:{first}"))
        sent_id, words, tags = "", [], []

    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            finish()
        elif line.startswith("#"):
            if line.startswith("# sent_id = "):
                sent_id = line[len("# sent_id = ") :].strip()
        else:
            fields = line.split("\t")
            if len(fields) != 10:
                raise ValueError(
                    f"{path}:{number} has {len(fields)} tab-separated fields; a CoNLL-U word "
                    "line has 10"
                )
            if "-" in fields[0] or "." in fields[0]:
                continue  # a multiword token's range or an empty node: not a word to tag
            if not fields[0].isdigit():
                raise ValueError(
                    f"{path}:{number} has ID {fields[0]!r}; a CoNLL-U word line starts with its "
                    "word index (1, 2, ...)"
                )
            if not words:
                first = number
            words.append(fields[1])
            tags.append(fields[3])
    finish()
    return out


def treebank_files() -> list[Path]:
    """The installed CoNLL-U files (web, then wiki), found from the distribution's file list
    (or site-packages/data/); FileNotFoundError with the install command when absent."""
    try:
        dist = importlib.metadata.distribution(TREEBANK_DIST)
        listed = {str(f).replace("\\", "/"): f for f in dist.files or ()}
        paths = [Path(dist.locate_file(listed[name])) for name in TREEBANK_FILES if name in listed]
    except importlib.metadata.PackageNotFoundError:
        paths = []
    if len(paths) != len(TREEBANK_FILES):
        purelib = Path(sysconfig.get_paths()["purelib"])
        paths = [purelib / name for name in TREEBANK_FILES]
    missing = [p for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(
            f"the Turkish treebank is not installed ({missing[0]} not found): {TREEBANK_INSTALL}"
        )
    return paths


def treebank_split(index: int) -> str:
    """The split of the ``index``-th sentence of a treebank file (the treebank's own rule)."""
    return {8: "val", 9: "test"}.get(index % 10, "train")


def treebank_sentences(split: str) -> list[ConlluSentence]:
    """The split's sentences: web, then wiki, each in file order."""
    check_text_split(split)
    out = []
    for path in treebank_files():
        stat = path.stat()
        sentences = _read_cached(str(path.resolve()), stat.st_size, stat.st_mtime_ns)
        out += [s for i, s in enumerate(sentences) if treebank_split(i) == split]
    return out


@functools.lru_cache(maxsize=4)
def _read_cached(path: str, size: int, mtime_ns: int) -> tuple[ConlluSentence, ...]:
    return tuple(read_conllu(path))


class TaggingDataset(TokenDataset):
    """Tagged sentences as WordPiece ids and per-piece labels, encoded once, held in memory.

    ``ds[i]`` is ``(ids (L,) int64, labels (L,) int64)``: [CLS] pieces [SEP], and each word's
    tag id on its first piece, -100 elsewhere. ``words``, ``tags`` and ``sent_ids`` are
    parallel lists; ``truncated`` counts sentences cut to ``tokenizer.max_length`` and
    ``dropped_tokens`` the words that lost their label that way.
    """

    def __init__(
        self,
        sentences: Sequence[ConlluSentence],
        tokenizer: WordPieceTokenizer,
        classes: Sequence[str] = TREEBANK_TAGS,
        *,
        name: str = "",
    ) -> None:
        self.name = name
        self.tokenizer = tokenizer
        self.classes = tuple(classes)
        index = {tag: i for i, tag in enumerate(self.classes)}
        unknown = sorted({t for s in sentences for t in s.tags} - set(index))
        if unknown:
            first = next(s for s in sentences if unknown[0] in s.tags)
            where = f" (the sentence at {first.source})" if first.source else ""
            raise ValueError(
                f"{name or 'treebank'}: tags {unknown[:5]} are not classes{where}; valid tags: "
                f"{', '.join(self.classes)}"
            )
        self.words = [list(s.words) for s in sentences]
        self.tags = [list(s.tags) for s in sentences]
        self.sent_ids = [s.sent_id for s in sentences]
        self.ids: list[Tensor] = []
        self.labels: list[Tensor] = []
        self.truncated = self.dropped_tokens = 0
        for sentence, (ids, word_ids, cut) in zip(
            sentences, tokenizer.encode_words_batch(self.words)
        ):
            labels = [IGNORE_INDEX] * len(ids)
            previous = None
            for position, word in enumerate(word_ids):
                if word is not None and word != previous:
                    labels[position] = index[sentence.tags[word]]
                previous = word
            labeled = sum(y != IGNORE_INDEX for y in labels)
            if cut:
                self.truncated += 1
                self.dropped_tokens += len(sentence.words) - labeled
            self.ids.append(torch.tensor(ids, dtype=torch.long))
            self.labels.append(torch.tensor(labels, dtype=torch.long))
        self.lengths = [len(t) for t in self.ids]

    @property
    def num_labels(self) -> int:
        return len(self.classes)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        return self.ids[i], self.labels[i]

    def get_batch(self, indices: Sequence[int] | Tensor) -> dict[str, Tensor]:
        """The rows at ``indices``: input_ids (B, L) right-padded with [PAD], attention_mask
        (B, L) bool True = real token, labels (B, L) with -100 on padding too."""
        index = self.batch_index(indices)
        ids, mask = self.pad_rows(self.ids, index, self.pad_token_id)
        labels, _ = self.pad_rows(self.labels, index, IGNORE_INDEX)
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}

    def num_tokens(self) -> int:
        """Treebank tokens (words) in the split, truncated ones included."""
        return sum(len(w) for w in self.words)

    def tag_counts(self) -> dict[str, int]:
        """Tokens per tag, in ``classes`` order."""
        counts = dict.fromkeys(self.classes, 0)
        for tags in self.tags:
            for tag in tags:
                counts[tag] += 1
        return counts

    def describe(self) -> str:
        """One line: sentences, tokens, ids, truncation."""
        return (
            f"{self.name or 'treebank'}: {len(self)} sentences, {self.num_tokens()} tokens, "
            f"{sum(self.lengths)} ids with [CLS]/[SEP] (at most {self.tokenizer.max_length}); "
            f"{self.truncated} sentences truncated, {self.dropped_tokens} tokens unlabeled"
        )


def load_turkish_pos(
    split: str = "train",
    *,
    tokenizer: WordPieceTokenizer | None = None,
    max_length: int = POS_MAX_LENGTH,
) -> TaggingDataset:
    """A split ("train", "val", "test") of the Turkish treebank's POS tags (see the module),
    encoded with ``tokenizer`` (default: the packaged MiniLM's WordPiece, ``max_length`` ids)."""
    sentences = treebank_sentences(split)
    tok = tokenizer if tokenizer is not None else minilm_tokenizer(max_length)
    return TaggingDataset(sentences, tok, name=f"turkish-pos:{split}")
