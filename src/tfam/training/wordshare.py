"""Does a character language model write words? The share of the words it generates that occur
in its training text: a measure a reader understands at once (a loss of 1.25 nats per character
says less), printed at the end of a causal-lm run on character data and kept in results.json.

How. :data:`SAMPLES` continuations of a fixed prompt (:data:`PROMPT`) are sampled with a fixed
seed and temperature (:data:`TEMPERATURE`), each as long as the model's context allows (at most
:data:`NEW_CHARS` new characters). The generated text (prompt excluded) is split into words:
runs of letters, with inner apostrophes ("LORD's"), compared without case; a sample's last word
is left out when the sample ends inside it (it was cut, not finished). The share is the
fraction of those words that are words of the training text.

    share = known_word_share(samples, text_vocabulary(train_text))
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = [
    "NEW_CHARS",
    "PROMPT",
    "SAMPLES",
    "TEMPERATURE",
    "WordShareCallback",
    "complete_words",
    "describe",
    "known_word_share",
    "sample_word_share",
    "text_vocabulary",
    "word_share_callbacks",
]

PROMPT = "And God said"
SAMPLES = 8
NEW_CHARS = 200
TEMPERATURE = 0.8
SEED = 0

_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)*")


def text_vocabulary(text: str) -> set[str]:
    """The words of ``text``, lower-cased."""
    return {w.lower() for w in _WORD.findall(text)}


def complete_words(sample: str) -> list[str]:
    """The words of ``sample``, lower-cased, without a last word the sample ends inside."""
    words = [m for m in _WORD.finditer(sample)]
    if words and words[-1].end() == len(sample):
        words = words[:-1]
    return [m.group().lower() for m in words]


def known_word_share(samples: Iterable[str], vocabulary: set[str]) -> tuple[float, int]:
    """(share of the samples' complete words found in ``vocabulary``, number of words);
    NaN when there is no complete word."""
    words = [w for s in samples for w in complete_words(s)]
    if not words:
        return float("nan"), 0
    return sum(w in vocabulary for w in words) / len(words), len(words)


@torch.inference_mode()
def sample_word_share(
    model: nn.Module,
    tokenizer: Any,
    train_text: str,
    *,
    prompt: str = PROMPT,
    samples: int = SAMPLES,
    new_chars: int = NEW_CHARS,
    temperature: float = TEMPERATURE,
    seed: int = SEED,
) -> dict[str, Any]:
    """Sample ``samples`` continuations of ``prompt`` from a character GPT (``model.generate``)
    and measure them against ``train_text``. Returns ``{"share", "words", "samples",
    "new_chars", "prompt", "temperature", "seed", "example"}`` (``example``: the first
    sample's text)."""
    plain = getattr(model, "module", model)
    device = next(plain.parameters()).device
    ids = list(tokenizer.encode(prompt))
    context = getattr(getattr(plain, "config", None), "max_positions", None)
    n = new_chars if context is None else min(new_chars, int(context) - len(ids))
    if n < 1:
        raise ValueError(
            f"prompt={prompt!r} is invalid for this model: its {len(ids)} characters leave no "
            f"room in the context of {context}"
        )
    generator = torch.Generator(device=device).manual_seed(seed)
    batch = torch.tensor([ids] * samples, dtype=torch.long, device=device)
    out = plain.generate(
        batch,
        max_new_tokens=n,
        do_sample=True,
        temperature=temperature,
        eos_token_id=[],
        generator=generator,
    )
    texts = [_continuation(tokenizer, ids, row[len(ids) :].tolist()) for row in out]
    share, words = known_word_share(texts, text_vocabulary(train_text))
    return {
        "share": share,
        "words": words,
        "samples": samples,
        "new_chars": n,
        "prompt": prompt,
        "temperature": temperature,
        "seed": seed,
        "example": prompt + texts[0],
    }


def _continuation(tokenizer: Any, prompt: Sequence[int], new: Sequence[int]) -> str:
    whole = tokenizer.decode([*prompt, *new])
    head = tokenizer.decode(list(prompt))
    return whole[len(head) :] if whole.startswith(head) else tokenizer.decode(list(new))


def describe(result: dict[str, Any]) -> str:
    """One line: ``generated words found in the training text: 93.1% of 240 (...)``."""
    return (
        f"generated words found in the training text: {100 * result['share']:.1f}% of "
        f"{result['words']} ({result['samples']} samples of {result['new_chars']} characters "
        f"after {result['prompt']!r}, temperature {result['temperature']:g}, seed "
        f"{result['seed']})"
    )


class WordShareCallback:
    """At the end of a character GPT's run (rank 0): :func:`sample_word_share` against the
    training text, one line printed, and ``words`` added to ``OUT/results.json``. The sampling
    uses its own generator: the run's random state is left as it was."""

    def __init__(self, train_text: str, tokenizer: Any) -> None:
        self.train_text = train_text
        self.tokenizer = tokenizer
        self.result: dict[str, Any] | None = None

    def on_finish(self, trainer: Any, result: Any) -> dict[str, Any]:
        from tfam.training.results import RESULTS_NAME, write_json

        self.result = sample_word_share(trainer.model, self.tokenizer, self.train_text)
        trainer._say(describe(self.result), always=True)
        trainer._say(f"  e.g. {self.result['example']!r}")
        if trainer.out_dir is not None:
            path = Path(trainer.out_dir) / RESULTS_NAME
            record = json.loads(path.read_text()) if path.is_file() else {}
            record["words"] = self.result
            write_json(path, record)
        return self.result


def word_share_callbacks(task: Any, train_set: Any) -> list[WordShareCallback]:
    """A :class:`WordShareCallback` for a causal-lm task on character data that carries its
    text (``train_set.text``, ``train_set.tokenizer``); none otherwise."""
    text = getattr(train_set, "text", None)
    tokenizer = getattr(train_set, "tokenizer", None)
    if getattr(task, "name", None) != "causal-lm" or getattr(task, "unit", None) != "characters":
        return []
    if not isinstance(text, str) or tokenizer is None:
        return []
    return [WordShareCallback(text, tokenizer)]
