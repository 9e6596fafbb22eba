"""Tokenizers for text tasks: a joint BPE (Hugging Face ``tokenizers``) and a character one;
BERT's WordPiece lives in :mod:`tfam.data.text.wordpiece` and loads through the same functions.

    tok = BPETokenizer.train(english + spanish, vocab_size=8000)   # deterministic
    ids = tok.encode("In the beginning")     # list[int], no special tokens
    tok.decode(ids)                          # "In the beginning" (special ids skipped)
    tok.save(run_dir)                        # run_dir/tokenizer.json
    tok = load_tokenizer(run_dir)            # whichever kind was saved there

BPE and character tokenizers share the special ids of :class:`tfam.models.transformer.TransformerConfig`:
``pad_id=0, bos_id=1, eos_id=2, unk_id=3``. Text is normalised to Unicode NFC with whitespace
runs collapsed to one space and ends stripped, so ``decode(encode(x))`` returns ``x`` for any
text so normalised whose characters the tokenizer knows; characters it has never seen become
``unk_id`` (one per unseen run, for BPE), never an error.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from tfam.fileio import atomic_write_bytes

__all__ = [
    "SPECIAL_TOKENS",
    "TOKENIZER_FILE",
    "BPETokenizer",
    "HFBackedTokenizer",
    "CharTokenizer",
    "Tokenizer",
    "load_tokenizer",
    "normalize_text",
    "register_tokenizer_kind",
]

TOKENIZER_FILE = "tokenizer.json"
# Index = id; the same in every tokenizer (and TransformerConfig's pad/bos/eos defaults).
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
_WS = re.compile(r"\s+")

# Kinds defined in other modules of tfam.data (WordPiece), so this module imports none of them:
# (does this parsed tokenizer.json belong to the kind?, its loader(text, path)). Each module
# registers its kind when imported, and importing tfam.data imports them all.
_KINDS: list[tuple[Callable[[Any], bool], Callable[[str, Path], Tokenizer]]] = []


def register_tokenizer_kind(
    matches: Callable[[Any], bool], load: Callable[[str, Path], Tokenizer]
) -> None:
    """Make :func:`load_tokenizer` read a kind of ``tokenizer.json``: ``matches(parsed_json)``
    says whether a file is of the kind, ``load(text, path)`` builds the tokenizer."""
    _KINDS.append((matches, load))


def normalize_text(text: str) -> str:
    """NFC, whitespace runs -> one space, ends stripped: the form every tokenizer encodes."""
    return _WS.sub(" ", unicodedata.normalize("NFC", text)).strip()


def _tokenizer_path(directory: str | os.PathLike) -> Path:
    directory = Path(directory).expanduser()
    path = directory / TOKENIZER_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"no {TOKENIZER_FILE} in {directory}: a tokenizer is written there by tokenizer.save() "
            "(tfam train saves it beside the checkpoint)"
        )
    return path


class Tokenizer(ABC):
    """What every tokenizer offers: ``encode``, ``decode``, ``save``, ``load``, ``vocab_size``
    and the special ids."""

    pad_id: int = PAD_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID
    unk_id: int = UNK_ID
    special_tokens: tuple[str, ...] = SPECIAL_TOKENS

    @property
    @abstractmethod
    def vocab_size(self) -> int: ...

    @abstractmethod
    def encode(self, text: str) -> list[int]: ...

    @abstractmethod
    def decode(self, ids: Iterable[int]) -> str: ...

    @abstractmethod
    def to_json(self) -> str: ...

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    @abstractmethod
    def id_to_token(self, i: int) -> str: ...

    def save(self, directory: str | os.PathLike) -> Path:
        """Write ``directory/tokenizer.json`` atomically (the directory is created)."""
        directory = Path(directory).expanduser()
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / TOKENIZER_FILE
        atomic_write_bytes(path, self.to_json().encode("utf-8"))
        return path

    @classmethod
    def load(cls, directory: str | os.PathLike) -> Tokenizer:
        """The tokenizer saved in ``directory`` — a BPETokenizer, a CharTokenizer or a
        WordPieceTokenizer, whichever was saved there, whichever class this is called on (a run
        directory of the copy task holds a CharTokenizer)."""
        path = _tokenizer_path(directory)
        try:
            text = path.read_text(encoding="utf-8")
            data = json.loads(text)
        except (OSError, ValueError) as err:
            raise ValueError(f"{path} is not a readable tokenizer file: {err}") from err
        if isinstance(data, dict) and data.get("tfam_tokenizer") == "char":
            return CharTokenizer._from_dict(data, path)
        for matches, load in _KINDS:
            if matches(data):
                return load(text, path)
        return BPETokenizer._from_json(text, path)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size})"


def load_tokenizer(directory: str | os.PathLike) -> Tokenizer:
    """The tokenizer saved in ``directory`` by ``save`` (BPE, character or WordPiece)."""
    return Tokenizer.load(directory)


class HFBackedTokenizer(Tokenizer):
    """A tfam tokenizer that wraps a Hugging Face ``tokenizers.Tokenizer`` (``self._tok``): its
    vocabulary size, its id -> token table and its JSON are the wrapped one's."""

    _tok: Any  # tokenizers.Tokenizer (imported lazily: tokenizers is slow to import)

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def id_to_token(self, i: int) -> str:
        token = self._tok.id_to_token(int(i))
        if token is None:
            raise ValueError(f"id={i} is invalid: expected 0..{self.vocab_size - 1}")
        return token

    def to_json(self) -> str:
        return self._tok.to_str()


class BPETokenizer(HFBackedTokenizer):
    """A joint (source + target) BPE over characters, SentencePiece-style: a space becomes
    "▁" and starts the next piece, so decoding restores spacing exactly. Characters absent from
    training become ``<unk>`` (byte-level BPE would instead spell unseen scripts as byte pieces
    that a model has never trained on)."""

    def __init__(self, tokenizer: Any) -> None:
        """Wrap a ``tokenizers.Tokenizer`` whose first four ids are :data:`SPECIAL_TOKENS`."""
        for i, token in enumerate(SPECIAL_TOKENS):
            if tokenizer.token_to_id(token) != i:
                raise ValueError(
                    f"tokenizer is invalid: {token!r} must have id {i}, "
                    f"has {tokenizer.token_to_id(token)}"
                )
        self._tok = tokenizer

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        vocab_size: int = 8000,
        *,
        min_frequency: int = 2,
        limit_alphabet: int = 1000,
    ) -> BPETokenizer:
        """Learn merges from ``texts`` (source and target sentences together) up to
        ``vocab_size`` ids, specials included. The same texts give the same tokenizer."""
        from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, trainers
        from tokenizers import Tokenizer as HFTokenizer

        if not isinstance(vocab_size, int) or vocab_size <= len(SPECIAL_TOKENS):
            raise ValueError(
                f"vocab_size={vocab_size!r} is invalid: expected an int above {len(SPECIAL_TOKENS)}"
            )
        tok = HFTokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
        tok.normalizer = normalizers.Sequence(
            [normalizers.NFC(), normalizers.Replace(Regex(_WS.pattern), " "), normalizers.Strip()]
        )
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            limit_alphabet=limit_alphabet,
            special_tokens=list(SPECIAL_TOKENS),
            show_progress=False,
        )
        # A list, not a generator: training order is part of determinism, and it is read once.
        tok.train_from_iterator([normalize_text(t) for t in texts], trainer=trainer)
        return cls(tok)

    @classmethod
    def _from_json(cls, text: str, path: Path) -> BPETokenizer:
        from tokenizers import Tokenizer as HFTokenizer

        try:
            return cls(HFTokenizer.from_str(text))
        except Exception as err:  # tokenizers raises its own exception types
            raise ValueError(f"{path} is not a readable tokenizer file: {err}") from err

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, no special tokens; ``[]`` for empty or whitespace-only text."""
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``; pad, bos, eos and unk are skipped (and the spaces around a skipped
        piece collapsed to one)."""
        return normalize_text(self._tok.decode([int(i) for i in ids], skip_special_tokens=True))


class CharTokenizer(Tokenizer):
    """One id per character (symbols after the four specials, in the given order).

    ``spaced=True`` reads text as whitespace-separated one-character symbols ("a b c" -> three
    ids; spaces are not tokens) and decodes with single spaces between them: the synthetic copy
    and reverse tasks. ``spaced=False`` keeps spaces as a symbol like any other.
    """

    def __init__(self, symbols: Sequence[str], *, spaced: bool = False) -> None:
        symbols = list(symbols)
        bad = [s for s in symbols if not isinstance(s, str) or len(s) != 1]
        if bad:
            raise ValueError(f"symbols={bad[:3]!r} is invalid: expected single characters")
        if len(set(symbols)) != len(symbols):
            raise ValueError("symbols is invalid: a character appears twice")
        if spaced and any(s.isspace() for s in symbols):
            raise ValueError("symbols is invalid: spaced=True separates symbols by whitespace")
        self.symbols = tuple(symbols)
        self.spaced = bool(spaced)
        self._ids = {s: i + len(SPECIAL_TOKENS) for i, s in enumerate(self.symbols)}

    @classmethod
    def train(
        cls, texts: Iterable[str], vocab_size: int | None = None, *, spaced: bool = False
    ) -> CharTokenizer:
        """The characters of ``texts`` (after normalisation), sorted; ``vocab_size`` (optional)
        keeps the most frequent ``vocab_size - 4`` of them, ties by character."""
        counts: dict[str, int] = {}
        for text in texts:
            text = normalize_text(text)
            for ch in text.replace(" ", "") if spaced else text:
                counts[ch] = counts.get(ch, 0) + 1
        chars = sorted(counts)
        if vocab_size is not None:
            if not isinstance(vocab_size, int) or vocab_size <= len(SPECIAL_TOKENS):
                raise ValueError(
                    f"vocab_size={vocab_size!r} is invalid: expected an int above "
                    f"{len(SPECIAL_TOKENS)}"
                )
            keep = sorted(chars, key=lambda c: (-counts[c], c))[: vocab_size - len(SPECIAL_TOKENS)]
            chars = sorted(keep)
        return cls(chars, spaced=spaced)

    @classmethod
    def _from_dict(cls, data: dict[str, Any], path: Path) -> CharTokenizer:
        try:
            return cls(data["symbols"], spaced=bool(data.get("spaced", False)))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{path} is not a readable tokenizer file: {err}") from err

    @property
    def vocab_size(self) -> int:
        return len(SPECIAL_TOKENS) + len(self.symbols)

    def encode(self, text: str) -> list[int]:
        """One id per character (unknown ones: ``unk_id``); ``[]`` for whitespace-only text."""
        text = normalize_text(text)
        if self.spaced:
            text = text.replace(" ", "")
        return [self._ids.get(ch, UNK_ID) for ch in text]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``; specials (and ids out of range) are skipped."""
        n = len(SPECIAL_TOKENS)
        chars = [self.symbols[i - n] for i in map(int, ids) if n <= i < self.vocab_size]
        return (" " if self.spaced else "").join(chars)

    def token_to_id(self, token: str) -> int:
        """The id of a symbol or special token; ``unk_id`` for a character it does not hold."""
        if token in SPECIAL_TOKENS:
            return SPECIAL_TOKENS.index(token)
        return self._ids.get(token, UNK_ID)

    def id_to_token(self, i: int) -> str:
        i = int(i)
        if 0 <= i < len(SPECIAL_TOKENS):
            return SPECIAL_TOKENS[i]
        if i < self.vocab_size:
            return self.symbols[i - len(SPECIAL_TOKENS)]
        raise ValueError(f"id={i} is invalid: expected 0..{self.vocab_size - 1}")

    def to_json(self) -> str:
        data = {
            "tfam_tokenizer": "char",
            "special_tokens": list(SPECIAL_TOKENS),
            "symbols": list(self.symbols),
            "spaced": self.spaced,
        }
        return json.dumps(data, ensure_ascii=False, indent=1)
