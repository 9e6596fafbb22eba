"""Sentence sentiment: the human-rated movie-review sentences of Hutto & Gilbert (2014), "VADER:
A Parsimonious Rule-based Model for Sentiment Analysis of Social Media Text" (ICWSM).

    train = load_sentiment("train")     # SentimentDataset, 8,454 sentences
    ids, label = train[0]               # [CLS] wordpieces [SEP] (L,) int64, 0 negative / 1 positive
    train.texts[0], train.classes       # the sentence; ("negative", "positive")
    batch = train.get_batch([0, 1, 2])  # {"input_ids", "attention_mask", "labels"}

The source: 10,605 sentences from Rotten Tomatoes reviews, each with the mean of 20 or more
human ratings on a -4 .. +4 scale (``movieReviewSnippets_GroundTruth.txt``: id, mean rating,
sentence, tab-separated). It ships inside the source distribution of vadersentiment 3.3.2
(``vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz``), which ``make install``
fetches into ``~/.cache/tfam/downloads`` with

    pip download --no-deps --no-binary :all: vadersentiment==3.3.2 -d ~/.cache/tfam/downloads

Nothing is downloaded at run time. The label is the sign of the mean rating: 37 sentences
rated exactly 0 are dropped, and 2 sentences that appear twice (same text, same sign) are kept
once, leaving 10,566 (5,325 negative, 5,241 positive). The split is fixed, stratified by label
and the same on every machine: within each label the sentences are ordered by the SHA-256 of
``"<split_seed>:<id>"`` and cut 10% test, 10% val (each rounded half to even), 80% train
(train 8,454: 4,261 negative, 4,193 positive; val 1,056: 532 / 524; test 1,056: 532 / 524).
Sentences are tokenized with the packaged MiniLM's uncased WordPiece, at most 128 ids ([CLS]
and [SEP] included; the longest sentence has 79, so none is truncated; 227,457 / 28,228 /
28,217 ids per split).
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tfam.data.sources.cache import tfam_cache_dir
from tfam.data.sources.lines import decode_lines
from tfam.data.sources.textsets import TextClassDataset
from tfam.data.text.dataset import TEXT_SPLITS, TextDatasetInfo, check_text_split
from tfam.data.text.wordpiece import MINILM_VOCAB_SIZE, WordPieceTokenizer, minilm_tokenizer

__all__ = [
    "SENTIMENT_CLASSES",
    "SENTIMENT_COUNTS",
    "SENTIMENT_FETCH",
    "SENTIMENT_INFO",
    "SENTIMENT_MAX_LENGTH",
    "SENTIMENT_SDIST",
    "RatedSentence",
    "SentimentDataset",
    "data_dirs",
    "find_sentiment_sdist",
    "load_sentiment",
    "read_rated_sentences",
    "sentiment_examples",
    "sentiment_split",
]

SENTIMENT_SDIST = "vaderSentiment-3.3.2.tar.gz"
SENTIMENT_FETCH = (
    "pip download --no-deps --no-binary :all: vadersentiment==3.3.2 -d ~/.cache/tfam/downloads "
    "(or: make install)"
)
_INNER_ARCHIVE = "vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz"
_RATINGS_FILE = "hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt"
SENTIMENT_CLASSES = ("negative", "positive")
SENTIMENT_MAX_LENGTH = 128
_TEST_FRACTION = _VAL_FRACTION = 0.1
# (negative, positive) sentences per split with split_seed 0: the catalog's facts, loading
# nothing; tests/data/test_text_datasets.py checks them against the file.
SENTIMENT_COUNTS: dict[str, tuple[int, int]] = {
    "train": (4261, 4193),
    "val": (532, 524),
    "test": (532, 524),
}

SENTIMENT_INFO = TextDatasetInfo.of_splits(
    "sentiment",
    MINILM_VOCAB_SIZE,
    {split: sum(counts) for split, counts in SENTIMENT_COUNTS.items()},
    classes=SENTIMENT_CLASSES,
    head="sequence",
    description=(
        "movie-review sentences rated by 20+ people (Hutto & Gilbert, ICWSM 2014; in the "
        "vadersentiment 3.3.2 source distribution), label = sign of the mean rating; fixed "
        "stratified split: "
        + ", ".join(f"{s} {n} negative / {p} positive" for s, (n, p) in SENTIMENT_COUNTS.items())
        + f"; MiniLM WordPiece, at most {SENTIMENT_MAX_LENGTH} ids"
    ),
)


def data_dirs(root: str | os.PathLike | None = None) -> list[Path]:
    """Where downloaded source files are looked for, in order: ``root``, ``$TFAM_DATA``,
    ``<cache>/downloads`` and ``<cache>`` (cache: :func:`~tfam.data.sources.cache.tfam_cache_dir`,
    ``$TFAM_CACHE`` or ``~/.cache/tfam``)."""
    dirs = [] if root is None else [Path(root).expanduser()]
    if os.environ.get("TFAM_DATA"):
        dirs.append(Path(os.environ["TFAM_DATA"]).expanduser())
    cache = tfam_cache_dir()
    return [*dirs, cache / "downloads", cache]


def find_sentiment_sdist(root: str | os.PathLike | None = None) -> Path:
    """The vadersentiment 3.3.2 source archive in the first of :func:`data_dirs` that has it;
    FileNotFoundError naming the places and the command that fetches it otherwise."""
    for directory in data_dirs(root):
        path = directory / SENTIMENT_SDIST
        if path.is_file():
            return path
    where = ", ".join(str(d) for d in data_dirs(root))
    raise FileNotFoundError(
        f"{SENTIMENT_SDIST} (the sentiment data) not found in {where}; fetch it with: "
        f"{SENTIMENT_FETCH}"
    )


@dataclass(frozen=True)
class RatedSentence:
    """One line of the ratings file: its id, the mean human rating (-4 .. +4), the sentence."""

    id: int
    mean: float
    text: str


def read_rated_sentences(sdist: str | os.PathLike) -> list[RatedSentence]:
    """Every line of ``movieReviewSnippets_GroundTruth.txt`` inside the source archive, in file
    order (10,605 for vadersentiment 3.3.2); ValueError naming the archive if it is not one."""
    sdist = Path(sdist)
    try:
        with tarfile.open(sdist, "r:gz") as outer:
            inner_bytes = _read_member(outer, _INNER_ARCHIVE)
        with tarfile.open(fileobj=io.BytesIO(inner_bytes), mode="r:gz") as inner:
            raw = _read_member(inner, _RATINGS_FILE)
    except (tarfile.TarError, OSError, EOFError) as err:
        raise ValueError(f"{sdist} is not a readable vadersentiment source archive: {err}") from err
    out = []
    where = f"{sdist}:{_RATINGS_FILE}"
    for number, line in enumerate(decode_lines(raw, where), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 3:
            raise ValueError(
                f"{where} line {number} has {len(fields)} tab-separated fields; "
                "expected 3 (id, mean rating, sentence)"
            )
        try:
            out.append(RatedSentence(int(fields[0]), float(fields[1]), fields[2].strip()))
        except ValueError:
            raise ValueError(
                f"{where} line {number}: id {fields[0]!r} and mean rating {fields[1]!r} are "
                "invalid: expected an integer and a number"
            ) from None
    return out


def _read_member(archive: tarfile.TarFile, name: str) -> bytes:
    try:
        handle = archive.extractfile(name)
    except KeyError:
        handle = None
    if handle is None:
        raise ValueError(f"the archive has no file {name}")
    return handle.read()


def sentiment_examples(root: str | os.PathLike | None = None) -> list[tuple[int, str, int]]:
    """(id, sentence, label) of the usable sentences in file order: label 1 for a positive mean
    rating, 0 for a negative one; mean 0 dropped, a repeated sentence kept once (the first)."""
    path = find_sentiment_sdist(root)
    stat = path.stat()
    return list(_examples(str(path.resolve()), stat.st_size, stat.st_mtime_ns))


@functools.lru_cache(maxsize=2)
def _examples(path: str, size: int, mtime_ns: int) -> tuple[tuple[int, str, int], ...]:
    seen: set[str] = set()
    out = []
    for row in read_rated_sentences(path):
        key = " ".join(row.text.lower().split())
        if row.mean == 0 or key in seen:
            continue
        seen.add(key)
        out.append((row.id, row.text, int(row.mean > 0)))
    return tuple(out)


def sentiment_split(
    ids: Sequence[int], labels: Sequence[int], split_seed: int = 0
) -> dict[str, list[int]]:
    """Positions (into ``ids``) of each split: per label, ids ordered by the SHA-256 of
    ``f"{split_seed}:{id}"``, the first 10% (rounded) test, the next 10% val, the rest train.
    Each split is then in hash order, not file order (the file lists one label after the
    other, so its first sentences would all share a label). The same on every machine and
    library version (no RNG)."""
    if len(ids) != len(labels):
        raise ValueError(f"ids has {len(ids)} items, labels {len(labels)}: expected equal")

    def key(i: int) -> str:
        return hashlib.sha256(f"{split_seed}:{ids[i]}".encode()).hexdigest()

    out: dict[str, list[int]] = {s: [] for s in TEXT_SPLITS}
    for label in sorted(set(labels)):
        members = [i for i, y in enumerate(labels) if y == label]
        members.sort(key=key)
        n_test = round(_TEST_FRACTION * len(members))
        n_val = round(_VAL_FRACTION * len(members))
        out["test"] += members[:n_test]
        out["val"] += members[n_test : n_test + n_val]
        out["train"] += members[n_test + n_val :]
    return {s: sorted(v, key=key) for s, v in out.items()}


class SentimentDataset(TextClassDataset):
    """Sentences with a binary label, encoded once ([CLS] pieces [SEP]), held in memory: a
    :class:`TextClassDataset` whose classes are negative and positive.

    ``ds[i]`` is ``(ids (L,) int64, label int)``; ``texts``, ``labels`` and ``source_ids`` (the
    ratings file's ids) are parallel lists; ``lengths`` the ids per sentence; ``truncated`` how
    many sentences lost pieces to ``tokenizer.max_length``.
    """

    def __init__(
        self,
        texts: Sequence[str],
        labels: Sequence[int],
        tokenizer: WordPieceTokenizer,
        *,
        name: str = "",
        source_ids: Sequence[int] | None = None,
    ) -> None:
        if len(texts) != len(labels):
            raise ValueError(f"texts has {len(texts)} items, labels {len(labels)}: expected equal")
        bad = [y for y in labels if y not in range(len(SENTIMENT_CLASSES))]
        if bad:
            raise ValueError(f"labels={bad[:3]} are invalid: expected 0 (negative) or 1 (positive)")
        super().__init__([str(t) for t in texts], labels, tokenizer, SENTIMENT_CLASSES, name=name)
        self.source_ids = list(source_ids) if source_ids is not None else list(range(len(texts)))

    def class_counts(self) -> list[int]:
        """Sentences per class, in ``classes`` order."""
        return [self.labels.count(c) for c in range(len(self.classes))]

    def describe(self) -> str:
        """One line: sentences, label balance, ids per sentence."""
        counts = self.class_counts()
        n = max(1, len(self))
        balance = ", ".join(
            f"{c} {k} ({100 * k / n:.1f}%)" for c, k in zip(self.classes, counts, strict=True)
        )
        return (
            f"{self.name or 'sentiment'}: {len(self)} sentences ({balance}), "
            f"{sum(self.lengths)} ids with [CLS]/[SEP], at most {self.tokenizer.max_length}, "
            f"{self.truncated} truncated"
        )


def load_sentiment(
    split: str = "train",
    *,
    root: str | os.PathLike | None = None,
    split_seed: int = 0,
    tokenizer: WordPieceTokenizer | None = None,
    max_length: int = SENTIMENT_MAX_LENGTH,
) -> SentimentDataset:
    """A split ("train", "val", "test") of the movie-review sentences (see the module), encoded
    with ``tokenizer`` (default: the packaged MiniLM's WordPiece, ``max_length`` ids)."""
    check_text_split(split)
    examples = sentiment_examples(root)
    ids = [e[0] for e in examples]
    labels = [e[2] for e in examples]
    chosen = sentiment_split(ids, labels, split_seed)[split]
    tok = tokenizer if tokenizer is not None else minilm_tokenizer(max_length)
    return SentimentDataset(
        [examples[i][1] for i in chosen],
        [labels[i] for i in chosen],
        tok,
        name=f"sentiment:{split}",
        source_ids=[ids[i] for i in chosen],
    )
