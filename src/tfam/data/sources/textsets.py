"""The datasets and tokenizers of the user's own text files (:mod:`tfam.data.sources.files`
reads, splits and encodes the files with them).

    ds = TextClassDataset(["a fine film", ("a", "b")], [1, 0], wordpiece, ["neg", "pos"])
    ds.get_batch([0, 1])       # input_ids (B, L), attention_mask (B, L), labels (B,)
    TextLines(lines, wordpiece).get_batch([0])        # input_ids, attention_mask: masked later
    TokenWindows(lines, bpe, context=128)[0]          # (129,) ids, as CharWindows
    tok = train_byte_bpe(texts, vocab_target(texts)[0])   # GPT-2's kind, tfam's special ids
    tok = train_wordpiece(texts, vocab_target(texts)[0])  # BERT's uncased WordPiece
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from tfam.data.sources.charlm import CharWindows
from tfam.data.text.dataset import TokenDataset
from tfam.data.text.tokenizer import (
    SPECIAL_TOKENS,
    TOKENIZER_FILE,
    BPETokenizer,
    Tokenizer,
    load_tokenizer,
)
from tfam.data.text.wordpiece import WordPieceTokenizer, minilm_tokenizer

__all__ = [
    "MAX_VOCAB",
    "MIN_VOCAB",
    "PRETRAINED_TOKENIZERS",
    "TEXT_MAX_LENGTH",
    "TextClassDataset",
    "TextLines",
    "TokenWindows",
    "given_tokenizer",
    "train_byte_bpe",
    "train_wordpiece",
    "vocab_target",
]

TEXT_MAX_LENGTH = 128  # ids per BERT input ([CLS] and [SEP] included), as the catalog's
MIN_VOCAB, MAX_VOCAB = 300, 16000
# Pretrained starts whose tokenizer replaces a trained one (tfam.runs knows the same table).
PRETRAINED_TOKENIZERS: dict[str, Callable[[], Tokenizer]] = {
    "minilm_l6": lambda: minilm_tokenizer(TEXT_MAX_LENGTH)
}


# -- datasets ---------------------------------------------------------------------------------
class TextClassDataset(TokenDataset):
    """Texts (or sentence pairs) with a class each, encoded once ([CLS] a [SEP] (b [SEP])).

    ``ds[i]`` is ``(ids (L,) int64, label int)``; ``texts``, ``labels`` parallel lists,
    ``classes`` the label names (id order), ``truncated`` the texts cut to the tokenizer's
    ``max_length``. ``get_batch`` gives input_ids (B, L), attention_mask (B, L), labels (B,).
    """

    def __init__(
        self,
        texts: Sequence[str | tuple[str, str]],
        labels: Sequence[int],
        tokenizer: WordPieceTokenizer,
        classes: Sequence[str],
        *,
        name: str = "",
    ) -> None:
        self.name = name
        self.tokenizer = tokenizer
        self.classes = tuple(classes)
        self.texts = list(texts)
        self.labels = [int(y) for y in labels]
        rows, cut = tokenizer.encode_batch_flagged(self.texts)
        self.ids = [torch.tensor(r, dtype=torch.long) for r in rows]
        self.lengths = [len(r) for r in rows]
        self.truncated = sum(cut)

    @property
    def num_labels(self) -> int:
        return len(self.classes)

    def __getitem__(self, i: int) -> tuple[Tensor, int]:
        return self.ids[i], self.labels[i]

    def get_batch(self, indices: Sequence[int] | Tensor) -> dict[str, Tensor]:
        index = self.batch_index(indices)
        ids, mask = self.pad_rows(self.ids, index, self.pad_token_id)
        labels = torch.tensor([self.labels[i] for i in index], dtype=torch.long)
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}

    def describe(self) -> str:
        counts = [self.labels.count(c) for c in range(len(self.classes))]
        shown = ", ".join(f"{c} {k}" for c, k in zip(self.classes, counts))
        return (
            f"{self.name}: {len(self)} texts ({shown}), {sum(self.lengths)} ids, "
            f"{self.truncated} truncated"
        )


class TextLines(TokenDataset):
    """Lines of text for masked-LM pre-training, each [CLS] pieces [SEP] (cut to the
    tokenizer's ``max_length``: ``truncated`` counts them); ``ds[i]`` is ids (L,), and
    ``get_batch`` input_ids (B, L) and attention_mask (B, L), unmasked (the masked-lm task
    masks them)."""

    def __init__(
        self, texts: Sequence[str], tokenizer: WordPieceTokenizer, *, name: str = ""
    ) -> None:
        self.name = name
        self.tokenizer = tokenizer
        self.texts = list(texts)
        rows, cut = tokenizer.encode_batch_flagged(self.texts)
        self.ids = [torch.tensor(r, dtype=torch.long) for r in rows]
        self.lengths = [len(r) for r in rows]
        self.truncated = sum(cut)

    def __getitem__(self, i: int) -> Tensor:
        return self.ids[i]

    def get_batch(self, indices: Sequence[int] | Tensor) -> dict[str, Tensor]:
        index = self.batch_index(indices)
        ids, mask = self.pad_rows(self.ids, index, self.pad_token_id)
        return {"input_ids": ids, "attention_mask": mask}

    def describe(self) -> str:
        return (
            f"{self.name}: {len(self)} lines, {sum(self.lengths)} ids, {self.truncated} truncated"
        )


class TokenWindows(CharWindows):
    """A text's token ids (any tokenizer) in windows of ``context + 1`` ids with stride
    ``context``: :class:`CharWindows`' items and batches (input_ids (B, context), labels (B,
    context)) for a trained BPE, or a run's tokenizer. The lines are joined by one space."""

    def __init__(
        self, texts: Sequence[str], tokenizer: Tokenizer, *, context: int, name: str = ""
    ) -> None:
        if not isinstance(context, int) or isinstance(context, bool) or context < 1:
            raise ValueError(f"context={context!r} is invalid: expected a positive int")
        self.name = name
        self.text = " ".join(texts)
        self.tokenizer = tokenizer
        self.context = context
        self.books = ()
        self.ids = torch.tensor(tokenizer.encode(self.text), dtype=torch.long)
        self.unknown = int((self.ids == tokenizer.unk_id).sum())

    def describe(self) -> str:
        return (
            f"{self.name}: {len(self.ids):,} tokens, {len(self):,} windows of {self.context} + 1 "
            f"(stride {self.context}), {self.unknown} unknown"
        )


# -- tokenizers -------------------------------------------------------------------------------
def vocab_target(texts: Sequence[str]) -> tuple[int, int]:
    """(vocabulary target, distinct whitespace-separated words of ``texts``): the target is
    ``min(16000, 300 + words)``."""
    words = len({w for t in texts for w in t.split()})
    return min(MAX_VOCAB, MIN_VOCAB + words), words


def train_wordpiece(
    texts: Sequence[str], vocab_size: int, max_length: int = TEXT_MAX_LENGTH
) -> WordPieceTokenizer:
    """BERT's uncased WordPiece trained on ``texts`` (specials [PAD]=0 [UNK] [CLS] [SEP]
    [MASK]; [CLS] a [SEP] (b [SEP]) added by encode, ``max_length`` ids at most)."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = HFTokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=specials, show_progress=False
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    tok.enable_truncation(max_length)
    return WordPieceTokenizer._from_json(tok.to_str(), Path("a trained WordPiece"))


def train_byte_bpe(texts: Sequence[str], vocab_size: int) -> BPETokenizer:
    """A byte-level BPE (GPT-2's kind: any text encodes, none is <unk>) trained on ``texts``,
    with tfam's special ids (<pad>=0 <s>=1 </s>=2 <unk>=3) and its text normalisation."""
    from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, trainers
    from tokenizers import Tokenizer as HFTokenizer

    tok = HFTokenizer(models.BPE())
    tok.normalizer = normalizers.Sequence(
        [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()]
    )
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    return BPETokenizer(tok)


def given_tokenizer(spec: Any) -> Tokenizer | None:
    """A tokenizer to use instead of training one: a Tokenizer, a directory with a
    ``tokenizer.json`` (a run), or a pretrained start's name (``minilm_l6``); None otherwise."""
    if spec is None or isinstance(spec, Tokenizer):
        return spec
    if str(spec) in PRETRAINED_TOKENIZERS and not Path(str(spec)).is_dir():
        return PRETRAINED_TOKENIZERS[str(spec)]()
    path = Path(str(spec)).expanduser()
    return load_tokenizer(path) if (path / TOKENIZER_FILE).is_file() else None
