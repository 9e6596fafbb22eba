"""Sequence-to-sequence data: King James English -> Reina-Valera 1909 Spanish, copy and reverse.

    train = load_kjv_rv("train")          # Seq2SeqDataset; its BPE is trained once and cached
    src_ids, tgt_ids = train[0]           # tokens + [eos];  [bos] + tokens + [eos]
    train.pairs[0]                        # ("In the beginning God ...", "EN el principio ...")
    test = load_kjv_rv("test").subset(QUICK_EVAL_SIZE)   # a fixed quick-eval subset
    copy = load_symbol_task("copy", "train")              # "f a c" -> "f a c"

The held-out split is by whole books (:data:`VAL_BOOKS`, :data:`TEST_BOOKS`), not random
verses: the Bible repeats itself (parallel histories, the synoptic gospels, refrains), and a
random verse split would put near-copies of test verses in training.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from tfam.data.sources.cache import tfam_cache_dir
from tfam.data.sources.sword import VerseRef, parallel_verses
from tfam.data.text.dataset import TEXT_SPLITS, TokenDataset, split_of_book
from tfam.data.text.tokenizer import (
    TOKENIZER_FILE,
    BPETokenizer,
    CharTokenizer,
    Tokenizer,
    load_tokenizer,
)

__all__ = [
    "KJV_RV_MODULES",
    "KJV_RV_VOCAB",
    "QUICK_EVAL_SIZE",
    "SYMBOL_TASKS",
    "TEST_BOOKS",
    "VAL_BOOKS",
    "Seq2SeqDataset",
    "book_split",
    "kjv_rv_pairs",
    "kjv_rv_tokenizer",
    "load_kjv_rv",
    "load_symbol_task",
    "symbol_pairs",
]

KJV_RV_MODULES = ("engKJV2006eb", "spaRV1909eb")  # (source English, target Spanish)
KJV_RV_VOCAB = 8000
QUICK_EVAL_SIZE = 500  # a fixed, evenly spread subset for a quick BLEU (beam search is slow)

# Held-out books, chosen once. Each set spans genres, so a score is not one style's: narrative
# history, wisdom poetry, NT narrative, letters. None has a near-parallel elsewhere in the Bible
# (unlike Samuel-Kings/Chronicles, the synoptic gospels, Ephesians/Colossians, 2 Peter/Jude,
# Isaiah 36-39 = 2 Kings 18-20), so no near-copy of a held-out verse is trained on; the NT's
# quotations of the OT are translated anew there, not copied. Genesis stays in training (the
# translation demo's first verse).
VAL_BOOKS = ("Ruth", "Eccl", "Jonah", "Gal")  # 503 verse pairs: a fast validation loss
TEST_BOOKS = ("Josh", "Prov", "Acts", "1Cor")  # 3,016 verse pairs


def book_split(book: str) -> str:
    """The split ("train", "val" or "test") that a book (OSIS name) belongs to."""
    return split_of_book(book, VAL_BOOKS, TEST_BOOKS)


def _check_split(split: str) -> str:
    if split not in TEXT_SPLITS:
        raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(TEXT_SPLITS)}")
    return split


class Seq2SeqDataset(TokenDataset):
    """(source, target) text pairs as token ids, encoded once, held in memory.

    ``ds[i]`` is ``(src_ids, tgt_ids)``: int64 tensors ``(Ls,)`` = tokens + [eos] and
    ``(Lt,)`` = [bos] + tokens + [eos]. ``pairs`` holds the texts (references for BLEU),
    ``lengths`` the per-example ``max(Ls, Lt)`` (for length bucketing), ``refs`` the verse
    references when the data has them. ``max_len`` drops examples with ``max(Ls, Lt)`` above it
    (or, with ``truncate=True``, cuts their tokens so they fit, keeping eos), with a warning
    that says how many; ``dropped`` and ``truncated`` count them.
    """

    def __init__(
        self,
        pairs: Sequence[tuple[str, str]],
        tokenizer: Tokenizer,
        *,
        name: str = "",
        max_len: int | None = None,
        truncate: bool = False,
        refs: Sequence[VerseRef] | None = None,
    ) -> None:
        if refs is not None and len(refs) != len(pairs):
            raise ValueError(f"refs has {len(refs)} items, pairs {len(pairs)}: expected equal")
        if max_len is not None and (not isinstance(max_len, int) or max_len < 3):
            raise ValueError(f"max_len={max_len!r} is invalid: expected an int >= 3 or None")
        self.tokenizer = tokenizer
        self.name = name
        self.max_len = max_len
        self.truncate = bool(truncate)
        pairs = [(str(s), str(t)) for s, t in pairs]
        src_tok = tokenizer.encode_batch([s for s, _ in pairs])
        tgt_tok = tokenizer.encode_batch([t for _, t in pairs])
        eos, bos = tokenizer.eos_id, tokenizer.bos_id
        keep_pairs, keep_refs, self.src, self.tgt, self.lengths = [], [], [], [], []
        self.dropped = self.truncated = 0
        for i, (s, t) in enumerate(zip(src_tok, tgt_tok)):
            if max_len is not None and max(len(s) + 1, len(t) + 2) > max_len:
                if not self.truncate:
                    self.dropped += 1
                    continue
                s, t = s[: max_len - 1], t[: max_len - 2]
                self.truncated += 1
            self.src.append(torch.tensor([*s, eos], dtype=torch.long))
            self.tgt.append(torch.tensor([bos, *t, eos], dtype=torch.long))
            self.lengths.append(max(len(s) + 1, len(t) + 2))
            keep_pairs.append(pairs[i])
            if refs is not None:
                keep_refs.append(refs[i])
        self.pairs: list[tuple[str, str]] = keep_pairs
        self.refs: list[VerseRef] | None = keep_refs if refs is not None else None
        if self.dropped or self.truncated:
            what = "dropped" if self.dropped else "truncated"
            warnings.warn(
                f"{name or 'dataset'}: {self.dropped or self.truncated} of {len(pairs)} examples "
                f"{what}: longer than max_len={max_len} tokens (with bos/eos)",
                stacklevel=2,
            )

    # The facts a model config must equal (TASK_FACTS["seq2seq"]): vocab_size and pad_token_id
    # from TokenDataset, and these.
    @property
    def bos_token_id(self) -> int:
        return self.tokenizer.bos_id

    @property
    def eos_token_id(self) -> int:
        return self.tokenizer.eos_id

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        return self.src[i], self.tgt[i]

    def num_tokens(self) -> tuple[int, int]:
        """(source, target) token counts, bos/eos included."""
        return sum(len(s) for s in self.src), sum(len(t) for t in self.tgt)

    def _select(self, index: Sequence[int], name: str) -> Seq2SeqDataset:
        out = object.__new__(Seq2SeqDataset)
        out.__dict__.update(self.__dict__)
        out.name = name
        out.src = [self.src[i] for i in index]
        out.tgt = [self.tgt[i] for i in index]
        out.lengths = [self.lengths[i] for i in index]
        out.pairs = [self.pairs[i] for i in index]
        out.refs = None if self.refs is None else [self.refs[i] for i in index]
        return out

    def subset(self, n: int) -> Seq2SeqDataset:
        """``n`` examples spread evenly over the dataset (every book contributes), the same
        ones every time; the whole dataset when it has at most ``n``."""
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"n={n!r} is invalid: expected a positive int")
        if n >= len(self):
            return self
        index = [(k * len(self)) // n for k in range(n)]
        return self._select(index, f"{self.name}[:{n} evenly]")

    def with_max_len(self, max_len: int, truncate: bool = False) -> Seq2SeqDataset:
        """This dataset re-encoded for a model with ``max_len`` positions (see the class)."""
        return Seq2SeqDataset(
            self.pairs,
            self.tokenizer,
            name=self.name,
            max_len=max_len,
            truncate=truncate,
            refs=self.refs,
        )

    def __repr__(self) -> str:
        return f"Seq2SeqDataset({self.name!r}, {len(self)} pairs, vocab_size={self.vocab_size})"


# --- King James -> Reina-Valera --------------------------------------------------------------


def kjv_rv_pairs(split: str) -> list[tuple[VerseRef, str, str]]:
    """(reference, English, Spanish) of the split's verses, in canonical order."""
    _check_split(split)
    return [v for v in parallel_verses(*KJV_RV_MODULES) if book_split(v[0].book) == split]


def _tokenizer_key(vocab_size: int, texts: Sequence[str]) -> str:
    import tokenizers

    # Everything that changes the learned merges, the training text itself included (a change
    # in markup cleaning or in the held-out books trains a new tokenizer, never reuses one).
    digest = hashlib.sha256()
    settings = {"vocab_size": vocab_size, "kind": "bpe-metaspace-nfc-v2"}
    digest.update(json.dumps([settings, tokenizers.__version__]).encode())
    for text in texts:
        digest.update(text.encode("utf-8") + b"\n")
    return f"kjv-rv-bpe{vocab_size}-{digest.hexdigest()[:12]}"


def kjv_rv_tokenizer(
    vocab_size: int = KJV_RV_VOCAB, cache_dir: str | os.PathLike | None = None
) -> BPETokenizer:
    """The joint English+Spanish BPE trained on the train split's verses (~4 s), kept under
    ``cache_dir`` (default :func:`tfam_cache_dir`) in ``tokenizers/kjv-rv-bpe<vocab>-<hash>``,
    the hash over its settings and training text: built once, then loaded."""
    verses = kjv_rv_pairs("train")
    texts = [e for _, e, _ in verses] + [s for _, _, s in verses]
    root = Path(cache_dir).expanduser() if cache_dir is not None else tfam_cache_dir()
    directory = root / "tokenizers" / _tokenizer_key(vocab_size, texts)
    if (directory / TOKENIZER_FILE).is_file():
        tok = load_tokenizer(directory)
        if isinstance(tok, BPETokenizer) and tok.vocab_size == vocab_size:
            return tok
    tok = BPETokenizer.train(texts, vocab_size)
    if tok.vocab_size != vocab_size:  # TASK_FACTS promise the catalog's vocab_size
        raise ValueError(
            f"vocab_size={vocab_size} is invalid for kjv-rv: training stopped at {tok.vocab_size}"
        )
    tok.save(directory)
    return tok


def load_kjv_rv(
    split: str = "train",
    *,
    vocab_size: int = KJV_RV_VOCAB,
    max_len: int | None = None,
    truncate: bool = False,
    tokenizer: Tokenizer | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> Seq2SeqDataset:
    """A split of the KJV -> RV 1909 verse pairs, tokenized with ``tokenizer`` (default: the
    cached :func:`kjv_rv_tokenizer`; pass a run's own tokenizer to evaluate that run)."""
    verses = kjv_rv_pairs(split)
    tok = tokenizer if tokenizer is not None else kjv_rv_tokenizer(vocab_size, cache_dir)
    return Seq2SeqDataset(
        [(e, s) for _, e, s in verses],
        tok,
        name=f"kjv-rv:{split}",
        max_len=max_len,
        truncate=truncate,
        refs=[r for r, _, _ in verses],
    )


# --- synthetic copy and reverse ----------------------------------------------------------------

SYMBOL_TASKS = ("copy", "reverse")
SYMBOLS = "abcdefghijklmnop"  # 16 symbols; with 4 specials a 20-id vocabulary
SYMBOL_SIZES = {"train": 10000, "val": 500, "test": 500}
_SPLIT_SEEDS = {"train": 0, "val": 1, "test": 2}  # fixed per split: different sequences each


def symbol_tokenizer() -> CharTokenizer:
    """The copy/reverse tokenizer: the 16 symbols, written space-separated."""
    return CharTokenizer(SYMBOLS, spaced=True)


def symbol_pairs(
    task: str,
    split: str,
    *,
    size: int | None = None,
    min_len: int = 3,
    max_len: int = 12,
    seed: int = 0,
) -> list[tuple[str, str]]:
    """Seeded random symbol sequences ("c a f") and their copy or reversal; lengths uniform
    in [min_len, max_len]. The same arguments give the same pairs on every machine."""
    if task not in SYMBOL_TASKS:
        raise ValueError(f"task={task!r} is invalid: expected one of {', '.join(SYMBOL_TASKS)}")
    _check_split(split)
    size = SYMBOL_SIZES[split] if size is None else size
    if not 1 <= min_len <= max_len:
        raise ValueError(f"min_len={min_len}, max_len={max_len} are invalid: need 1 <= min <= max")
    g = torch.Generator().manual_seed(1000 * int(seed) + _SPLIT_SEEDS[split])
    lengths = torch.randint(min_len, max_len + 1, (size,), generator=g).tolist()
    pairs = []
    for n in lengths:
        seq = [SYMBOLS[i] for i in torch.randint(0, len(SYMBOLS), (n,), generator=g).tolist()]
        out = seq if task == "copy" else seq[::-1]
        pairs.append((" ".join(seq), " ".join(out)))
    return pairs


def load_symbol_task(
    task: str, split: str = "train", *, size: int | None = None, seed: int = 0
) -> Seq2SeqDataset:
    """The copy or reverse task's split as a :class:`Seq2SeqDataset` (train 10,000 pairs, val
    and test 500 each; lengths 3-12 over 16 symbols)."""
    pairs = symbol_pairs(task, split, size=size, seed=seed)
    return Seq2SeqDataset(pairs, symbol_tokenizer(), name=f"{task}:{split}")
