"""Character language modelling: the King James Bible, character by character.

    train = load_kjv_chars("train")     # CharWindows: 31,136 windows of 129 characters
    ids = train[0]                      # (context + 1,) int64; input = ids[:-1], target = ids[1:]
    train.tokenizer.decode(ids)         # "In the beginning God created the heaven and the ..."
    batch = train.get_batch([0, 1])     # {"input_ids": (2, 128), "labels": (2, 128)}

The text is the SWORD module engKJV2006eb (Debian's ``sword-text-kjv``, installed by
``make data``) read by :mod:`tfam.data.sources.sword`: plain verse text, verses joined by one space,
books in canonical order. Held out are the final books of the canon, whole: val = Hebrews,
James, 1 Peter, 2 Peter (71,521 characters, 558 windows), test = 1 John, 2 John, 3 John, Jude,
Revelation (81,499 characters, 636 windows); train is the other 57 books (3,985,512 characters,
31,136 windows). Whole books, not random
spans, because the Bible repeats itself (parallel histories, refrains): a random cut would put
near-copies of held-out text in training.

The :class:`~tfam.data.text.tokenizer.CharTokenizer` holds the characters of the training text
(65; with the 4 special ids a vocabulary of 69); a character seen only in val or test is
``<unk>`` (id 3): val has none, test two (the brackets of "[but]" in 1 John 2:23).

Windows: item ``k`` is characters ``k * context .. k * context + context`` (``context + 1`` of
them), so consecutive windows share one character, which is a target in one and an input in the
next. Every character after the first is predicted exactly once per pass: an epoch covers the
training text, and evaluation counts each held-out character once. The last
``(characters - 1) % context`` characters of a split (fewer than ``context``) fall outside the
last full window and are not predicted (103, 96 and 90 characters). The book texts are read once (3 s) and kept under the
tfam cache (``~/.cache/tfam/kjv-chars``), keyed by the module's files and the reader's source.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

import tfam.data.sources.sword as sword  # the module, not the package face (which imports us)
from tfam.data.sources.cache import tfam_cache_dir
from tfam.data.text.dataset import TextDatasetInfo, TokenDataset, check_text_split, split_of_book
from tfam.data.text.tokenizer import CharTokenizer, normalize_text
from tfam.fileio import atomic_write_bytes

__all__ = [
    "KJV_CHARS_INFO",
    "KJV_CONTEXT",
    "KJV_MODULE",
    "KJV_SPLIT_CHARS",
    "KJV_TEST_BOOKS",
    "KJV_VAL_BOOKS",
    "CharWindows",
    "kjv_book_texts",
    "kjv_char_split",
    "kjv_char_text",
    "kjv_char_tokenizer",
    "load_kjv_chars",
]

KJV_MODULE = "engKJV2006eb"
KJV_CONTEXT = 128
KJV_VAL_BOOKS = ("Heb", "Jas", "1Pet", "2Pet")
KJV_TEST_BOOKS = ("1John", "2John", "3John", "Jude", "Rev")
# Characters per split and the tokenizer's size: the catalog's facts, loading nothing (checked
# against the module by the tests).
KJV_SPLIT_CHARS = {"train": 3985512, "val": 71521, "test": 81499}
KJV_CHAR_VOCAB = 69


def _windows(chars: int, context: int = KJV_CONTEXT) -> int:
    return max(0, (chars - 1) // context)


KJV_CHARS_INFO = TextDatasetInfo.of_splits(
    "kjv",
    KJV_CHAR_VOCAB,
    {split: _windows(chars) for split, chars in KJV_SPLIT_CHARS.items()},
    description=(
        "King James Bible (SWORD module engKJV2006eb, Debian sword-text-kjv), characters; "
        f"val: {', '.join(KJV_VAL_BOOKS)} ({KJV_SPLIT_CHARS['val']:,} chars); test: "
        f"{', '.join(KJV_TEST_BOOKS)} ({KJV_SPLIT_CHARS['test']:,} chars); train: the other "
        f"books ({KJV_SPLIT_CHARS['train']:,} chars); windows of {KJV_CONTEXT} + 1 characters, "
        f"stride {KJV_CONTEXT}; {KJV_CHAR_VOCAB} ids"
    ),
)


def kjv_char_split(book: str) -> str:
    """The split ("train", "val", "test") a book (OSIS name) belongs to in the kjv dataset."""
    return split_of_book(book, KJV_VAL_BOOKS, KJV_TEST_BOOKS)


def _cache_key(module: str) -> str:
    # What changes the text: the module's files and the code that reads and cleans them.
    path, spelled = sword.find_module(module)
    digest = hashlib.sha256(json.dumps([module, spelled, "kjv-chars-v1"]).encode())
    for conf in sorted((path / "mods.d").glob("*.conf")):
        text = conf.read_text(encoding="utf-8", errors="replace")
        if f"[{spelled}]" in text:
            digest.update(text.encode())
            for line in text.splitlines():
                if line.startswith("DataPath="):
                    data = (path / line.split("=", 1)[1].strip()).resolve()
                    for f in sorted(data.rglob("*")) if data.exists() else ():
                        if f.is_file():
                            st = f.stat()
                            digest.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    digest.update(Path(sword.__file__).read_bytes())
    return f"{module}-{digest.hexdigest()[:16]}"


def kjv_book_texts(module: str = KJV_MODULE) -> list[tuple[str, str]]:
    """(OSIS book, text) of every book in canonical order; a book's text is its non-empty
    verses joined by one space. Read once, then kept in the tfam cache (see the module)."""
    return list(_book_texts(module))


@functools.lru_cache(maxsize=2)
def _book_texts(module: str) -> tuple[tuple[str, str], ...]:
    path = tfam_cache_dir() / "kjv-chars" / f"{_cache_key(module)}.json"
    if path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return tuple((str(b), str(t)) for b, t in data["books"])
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a damaged cache file is rebuilt below
    verses: dict[str, list[str]] = {}
    for ref, text in sword.read_verses(module):
        if text:
            verses.setdefault(ref.book, []).append(text)
    books = tuple((book, " ".join(parts)) for book, parts in verses.items())
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = json.dumps({"module": module, "books": books}, ensure_ascii=False)
        atomic_write_bytes(path, payload.encode("utf-8"))
    except OSError:
        pass  # a read-only cache only costs the next process the 3 s read
    return books


def kjv_char_text(split: str, module: str = KJV_MODULE) -> str:
    """The split's text: its books in canonical order, joined by one space."""
    check_text_split(split)
    return " ".join(t for b, t in kjv_book_texts(module) if kjv_char_split(b) == split)


def kjv_char_tokenizer(module: str = KJV_MODULE) -> CharTokenizer:
    """The characters of the training text, sorted, after the 4 special ids."""
    return _char_tokenizer(module)


@functools.lru_cache(maxsize=2)
def _char_tokenizer(module: str) -> CharTokenizer:
    return CharTokenizer(sorted(set(kjv_char_text("train", module))))


def _encode_chars(text: str, tokenizer: CharTokenizer) -> Tensor:
    """``tokenizer.encode(text)`` as a tensor, through a code-point table: 4 M characters in
    ~0.1 s instead of ~1 s (a Python loop)."""
    points = torch.from_numpy(np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).copy())
    points = points.to(torch.long)
    size = max(
        [int(points.max()) + 1 if len(points) else 0] + [ord(c) + 1 for c in tokenizer.symbols]
    )
    table = torch.full((size,), tokenizer.unk_id, dtype=torch.long)
    for symbol in tokenizer.symbols:
        table[ord(symbol)] = tokenizer.token_to_id(symbol)
    return table[points]


class CharWindows(TokenDataset):
    """A text as character ids, served as windows of ``context + 1`` ids with stride
    ``context`` (see the module): ``ds[k]`` is ``ids[k * context : k * context + context + 1]``.

    ``ids`` (N,) int64 is the whole text; ``num_targets`` the characters the windows predict
    (``len(self) * context``); ``unknown`` how many characters are ``<unk>``.
    """

    def __init__(
        self,
        text: str,
        tokenizer: CharTokenizer,
        *,
        context: int = KJV_CONTEXT,
        name: str = "",
        books: Sequence[str] = (),
    ) -> None:
        if not isinstance(context, int) or isinstance(context, bool) or context < 1:
            raise ValueError(f"context={context!r} is invalid: expected a positive int")
        self.name = name
        self.text = text
        self.tokenizer = tokenizer
        self.context = context
        self.books = tuple(books)
        if tokenizer.spaced:
            raise ValueError("tokenizer is invalid: expected spaced=False (spaces are characters)")
        if normalize_text(text) != text:  # what tokenizer.encode would change
            raise ValueError(
                f"{name or 'text'} is invalid: expected NFC text with single spaces and no "
                "whitespace at the ends (tfam.data.text.tokenizer.normalize_text)"
            )
        self.ids = _encode_chars(text, tokenizer)
        self.unknown = int((self.ids == tokenizer.unk_id).sum())

    @property
    def num_chars(self) -> int:
        return len(self.ids)

    @property
    def num_targets(self) -> int:
        return len(self) * self.context

    def __len__(self) -> int:
        return _windows(len(self.ids), self.context)

    def __getitem__(self, k: int) -> Tensor:
        n = len(self)
        if not -n <= k < n:
            raise IndexError(f"window {k} is out of range: {n} windows")
        k %= n
        start = k * self.context
        return self.ids[start : start + self.context + 1]

    def get_batch(self, indices: Sequence[int] | Tensor) -> dict[str, Tensor]:
        """The windows at ``indices``: input_ids (B, context) and labels (B, context), the
        next character of each input position."""
        index = torch.as_tensor([int(i) for i in indices], dtype=torch.long)
        if index.numel() == 0:
            raise ValueError("indices is empty: expected at least one window")
        if int(index.min()) < 0 or int(index.max()) >= len(self):
            raise IndexError(f"indices out of range: {len(self)} windows")
        offsets = index[:, None] * self.context + torch.arange(self.context + 1)
        rows = self.ids[offsets]
        return {"input_ids": rows[:, :-1], "labels": rows[:, 1:]}

    def describe(self) -> str:
        return (
            f"{self.name or 'text'}: {self.num_chars:,} characters, {len(self):,} windows of "
            f"{self.context} + 1 (stride {self.context}), {self.num_targets:,} predicted, "
            f"{self.unknown} unknown"
        )


def load_kjv_chars(
    split: str = "train", *, context: int = KJV_CONTEXT, module: str = KJV_MODULE
) -> CharWindows:
    """A split of the King James Bible as character windows (see the module); the tokenizer is
    the training text's, whichever split is loaded."""
    text = kjv_char_text(split, module)
    books = [b for b, _ in kjv_book_texts(module) if kjv_char_split(b) == split]
    return CharWindows(
        text, kjv_char_tokenizer(module), context=context, name=f"kjv:{split}", books=books
    )
