"""Byte-level text classification of 1,000-byte passages (``lra-text``): Long Range Arena's
"Text" task in kind (Tay et al. 2020: IMDB reviews read byte by byte, 1,000 or 4,000 bytes),
not its data. IMDB is not available offline; this task is built from the King James Bible
(the SWORD module tfam's ``kjv`` data set reads, :mod:`tfam.data.sources.charlm`):

    ds = load_bytetext("train")    # SequenceSet: [<cls>] + 1,000 byte ids, label = the genre
    ds.texts[0], ds.classes        # the passage; ("law", "history", "wisdom", ...)

The label is the genre of the book a passage comes from, six classes: law (Genesis-
Deuteronomy), history (Joshua-Esther), wisdom (Job-Song of Solomon), prophets (Isaiah-
Malachi), gospels (Matthew-Acts), letters (Romans-Revelation). Why this and not another offline
text: language identification (KJV against Reina-Valera) is solved by a few byte statistics;
the rated movie-review sentences (:mod:`tfam.data.sources.sentiment`) hold ~1.1 MB, so ~1,000
passages in all, too few to train on. Genre from 1,000 bytes needs words, names and style read
from bytes, across the whole passage (a passage of a prophet and one of a history share most
of their words), as IMDB's sentiment does; it is a different task, and its accuracies are not
comparable to LRA's.

Each book's text (its verses joined by one space, UTF-8) is cut into consecutive blocks of
4,000 bytes (the last, shorter piece dropped); each block goes to test, val or train by the
SHA-256 of ``"<book>:<block>"`` (10% / 10% / 80%). A val or test block gives its four
non-overlapping 1,000-byte passages; a train block gives the 13 passages starting every 250
bytes inside it (overlapping: more training text, none of it in another split). Every split then
keeps, per genre, as many passages as its rarest genre has there (chosen by a hash): balanced
classes, chance = 1/6. Token ids are ``byte + 2`` (``<pad>`` 0, ``<cls>`` 1): a
vocabulary of 258.
"""

from __future__ import annotations

import functools
import hashlib

import torch

from tfam.data.sources.charlm import kjv_book_texts
from tfam.data.sources.lra import SPECIALS, SequenceSet
from tfam.data.text.dataset import TextDatasetInfo, check_text_split

__all__ = [
    "BYTETEXT_CLASSES",
    "BYTETEXT_GENRES",
    "BYTETEXT_INFO",
    "BYTETEXT_LENGTH",
    "BYTETEXT_SIZES",
    "BYTE_VOCAB",
    "bytetext_passages",
    "load_bytetext",
]

BYTETEXT_LENGTH = 1000
BYTE_VOCAB = (*SPECIALS, *(f"0x{b:02x}" for b in range(256)))
# The genres, each its books' OSIS names (canonical order).
BYTETEXT_GENRES: dict[str, tuple[str, ...]] = {
    "law": ("Gen", "Exod", "Lev", "Num", "Deut"),
    "history": (
        "Josh", "Judg", "Ruth", "1Sam", "2Sam", "1Kgs", "2Kgs", "1Chr", "2Chr", "Ezra", "Neh",
        "Esth",
    ),
    "wisdom": ("Job", "Ps", "Prov", "Eccl", "Song"),
    "prophets": (
        "Isa", "Jer", "Lam", "Ezek", "Dan", "Hos", "Joel", "Amos", "Obad", "Jonah", "Mic",
        "Nah", "Hab", "Zeph", "Hag", "Zech", "Mal",
    ),
    "gospels": ("Matt", "Mark", "Luke", "John", "Acts"),
    "letters": (
        "Rom", "1Cor", "2Cor", "Gal", "Eph", "Phil", "Col", "1Thess", "2Thess", "1Tim", "2Tim",
        "Titus", "Phlm", "Heb", "Jas", "1Pet", "2Pet", "1John", "2John", "3John", "Jude", "Rev",
    ),
}  # fmt: skip
BYTETEXT_CLASSES = tuple(BYTETEXT_GENRES)
# Passages per split (balanced: 6 x the rarest genre's count), measured on the Debian package
# sword-text-kjv's engKJV2006eb; tests/data/test_lra.py checks them against the text.
BYTETEXT_SIZES = {"train": 5616, "val": 144, "test": 216}
_FRACTIONS = (("test", 0.1), ("val", 0.2))  # hash quantile below which a block goes there
_BLOCK = 4  # passages per block: the unit a split takes
_TRAIN_WINDOWS = 4  # training passages start every length / 4 bytes inside a training block

BYTETEXT_INFO = TextDatasetInfo.of_splits(
    "lra-text",
    len(BYTE_VOCAB),
    BYTETEXT_SIZES,
    description=(
        "byte-level classification of 1,000-byte King James passages by genre (law, history, "
        "wisdom, prophets, gospels, letters; balanced), LRA's Text task in kind but not its data "
        "(IMDB); ids = bytes + 2: " + " / ".join(f"{n:,} {s}" for s, n in BYTETEXT_SIZES.items())
    ),
    classes=BYTETEXT_CLASSES,
    head="sequence",
)


def _quantile(key: str) -> float:
    """A number in [0, 1) from the SHA-256 of ``key``: the same on every machine."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64


def bytetext_passages(length: int = BYTETEXT_LENGTH) -> dict[str, list[tuple[str, bytes, int]]]:
    """Per split, (key ``"<book>:<offset>"``, the passage's bytes, genre id), balanced (see the
    module), in hash order."""
    genre_of = {b: g for g, (_, books) in enumerate(BYTETEXT_GENRES.items()) for b in books}
    found: dict[str, list[list[tuple[float, str, bytes]]]] = {
        s: [[] for _ in BYTETEXT_CLASSES] for s in ("train", "val", "test")
    }
    block = _BLOCK * length
    for book, text in kjv_book_texts():
        if book not in genre_of:
            continue
        data = text.encode("utf-8")
        for i in range(len(data) // block):
            q = _quantile(f"{book}:{i}")
            split = next((s for s, cut in _FRACTIONS if q < cut), "train")
            stride = length // _TRAIN_WINDOWS if split == "train" else length
            for start in range(i * block, (i + 1) * block - length + 1, stride):
                key = f"{book}:{start}"
                passage = data[start : start + length]
                found[split][genre_of[book]].append((_quantile("order:" + key), key, passage))
    out: dict[str, list[tuple[str, bytes, int]]] = {}
    for split, per_genre in found.items():
        keep = min(len(items) for items in per_genre)
        chosen = [
            (order, key, data, genre)
            for genre, items in enumerate(per_genre)
            for order, key, data in sorted(items)[:keep]
        ]
        out[split] = [(key, data, genre) for _, key, data, genre in sorted(chosen)]
    return out


@functools.lru_cache(maxsize=2)
def _passages(length: int) -> dict[str, list[tuple[str, bytes, int]]]:
    return bytetext_passages(length)


def load_bytetext(split: str = "train", *, length: int = BYTETEXT_LENGTH) -> SequenceSet:
    """A split ("train", "val", "test") of the genre task (see the module): ``[<cls>]`` + the
    passage's ``length`` bytes as ids ``byte + 2``; kept in memory once read."""
    check_text_split(split)
    items = _passages(int(length))[split]
    rows = torch.tensor([list(data) for _, data, _ in items], dtype=torch.long).reshape(
        len(items), int(length)
    )
    return SequenceSet(
        rows + len(SPECIALS),
        [genre for _, _, genre in items],
        BYTETEXT_CLASSES,
        BYTE_VOCAB,
        name=f"lra-text:{split}",
        texts=[data.decode("utf-8", errors="replace") for _, data, _ in items],
    )
