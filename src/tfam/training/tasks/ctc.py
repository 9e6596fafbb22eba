"""Transcription by connectionist temporal classification (Graves et al. 2006).

The model gives, per output frame, logits over ``K = 1 + len(alphabet)`` outputs, 0 the blank:
``model(features (B, T, M), attention_mask (B, T)) -> (B, T', K)`` with ``T' =
config.output_lengths(T)`` (a subsampling speech encoder). The loss is
-log p(y | x) = -log sum over alignments a with B(a) = y of prod_t p(a_t | x), B removing
repeats then blanks (``torch.nn.functional.ctc_loss``), summed over utterances and averaged per
target symbol. Decoding is greedy (best path: argmax per frame, then B); the metric is the word
error rate, (substitutions + deletions + insertions) / reference words, by edit distance over
words. A dataset gives ``alphabet`` (the symbols, ids 1..K-1) and ``separator`` (what joins
decoded symbols: " " when each symbol is a word, the spoken digits; "" for characters).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tfam.training.tasks.audio import AudioTask, audio_forward, collate_audio
from tfam.training.tasks.base import IGNORE_INDEX, BaseTask, Batch, model_config, ratio

__all__ = ["CTC", "ctc_greedy", "edit_distance", "word_errors"]

BLANK = 0


def edit_distance(hyp: Sequence[Any], ref: Sequence[Any]) -> int:
    """Levenshtein distance between two sequences (substitutions, deletions, insertions all
    cost 1), by the usual dynamic programme over one row."""
    row = list(range(len(ref) + 1))
    for i, h in enumerate(hyp, start=1):
        prev, row[0] = row[0], i
        for j, r in enumerate(ref, start=1):
            cur = min(row[j] + 1, row[j - 1] + 1, prev + (h != r))
            prev, row[j] = row[j], cur
    return row[-1]


def word_errors(hyp: str, ref: str) -> tuple[int, int]:
    """(word errors, reference words): the edit distance between the whitespace-split words."""
    h, r = hyp.split(), ref.split()
    return edit_distance(h, r), len(r)


def ctc_greedy(logits: Tensor, lengths: Tensor) -> list[list[int]]:
    """Best-path decoding: logits (B, T', K), lengths (B,) -> per row the ids after collapsing
    repeats and removing blanks (0), within the row's length."""
    best = logits.argmax(dim=-1).cpu()
    out = []
    for row, n in zip(best, lengths.cpu().tolist(), strict=True):
        ids, last = [], BLANK
        for t in row[: int(n)].tolist():
            if t != last and t != BLANK:
                ids.append(t)
            last = t
        out.append(ids)
    return out


class CTC(AudioTask, BaseTask):
    """Transcription with CTC: batch ``{"features" (B, T, M), "attention_mask" (B, T),
    "labels" (B, U) target ids 1..K-1, -100 padding}``; items ``(features (T, M), ids (U,))``.
    ``count`` is the target symbols; metrics ``loss`` (per target symbol) and ``wer``."""

    name = "ctc"
    objective = "transcribe"
    metrics = ("loss", "wer")
    primary_metric = "wer"
    higher_is_better = False
    unit = "frames"

    def __init__(self, alphabet: Sequence[str], separator: str = "") -> None:
        self.alphabet = list(alphabet)
        self.separator = separator

    @classmethod
    def for_dataset(cls, dataset: Any) -> CTC:
        alphabet = getattr(dataset, "alphabet", None)
        if not alphabet:
            raise ValueError(
                "task 'ctc' needs a dataset with an alphabet (its output symbols, blank "
                "excluded): a transcribed speech dataset"
            )
        return cls(alphabet, str(getattr(dataset, "separator", "")))

    def text(self, ids: Sequence[int]) -> str:
        """Decoded ids -> text: the symbols joined by the separator."""
        return self.separator.join(self.alphabet[i - 1] for i in ids if 0 < i <= len(self.alphabet))

    def collate(self, items: Sequence[Any]) -> Batch:
        features, mask = collate_audio(items)
        targets = [torch.as_tensor(item[1], dtype=torch.int64) for item in items]
        longest = max((t.shape[0] for t in targets), default=0)
        labels = torch.full((len(items), longest), IGNORE_INDEX, dtype=torch.int64)
        for i, t in enumerate(targets):
            labels[i, : t.shape[0]] = t
        return {"features": features, "attention_mask": mask, "labels": labels}

    def count(self, batch: Batch) -> Tensor:
        return (batch["labels"] != IGNORE_INDEX).sum().double()

    def _loss_and_sums(self, model: nn.Module, batch: Batch) -> tuple[Tensor, dict[str, Tensor]]:
        logits = audio_forward(model, batch)  # (B, T', K)
        config = model_config(model)
        lengths = batch["attention_mask"].sum(dim=1)
        out_lengths = config.output_lengths(lengths) if config is not None else lengths
        labels = batch["labels"]
        target_lengths = (labels != IGNORE_INDEX).sum(dim=1)
        targets = labels.clamp(min=0)
        log_probs = logits.log_softmax(dim=-1).transpose(0, 1)  # (T', B, K): ctc_loss's layout
        # Summed over utterances; an impossible alignment (more symbols than frames) adds 0
        # instead of inf (zero_infinity), so one bad utterance cannot sink a batch.
        loss = F.ctc_loss(
            log_probs, targets, out_lengths, target_lengths, blank=BLANK,
            reduction="sum", zero_infinity=True,
        )  # fmt: skip
        with torch.no_grad():
            errors, words = 0, 0
            for ids, ref, n in zip(
                ctc_greedy(logits, out_lengths), labels.tolist(), target_lengths.tolist(),
                strict=True,
            ):  # fmt: skip
                e, w = word_errors(self.text(ids), self.text(ref[: int(n)]))
                errors, words = errors + e, words + w
            sums = {
                "loss": loss.detach().double(),
                "word_errors": torch.tensor(float(errors), dtype=torch.float64),
                "words": torch.tensor(float(words), dtype=torch.float64),
                "count": target_lengths.sum().double(),
            }
        return loss, sums

    def train_loss(
        self, model: nn.Module, batch: Batch, config: Any
    ) -> tuple[Tensor, dict[str, Tensor]]:
        return self._loss_and_sums(model, batch)

    def eval_sums(self, model: nn.Module, batch: Batch) -> dict[str, Tensor]:
        return self._loss_and_sums(model, batch)[1]

    def reduce(self, sums: dict[str, float]) -> dict[str, float]:
        words = sums.get("words", 0.0)
        wer = sums.get("word_errors", 0.0) / words if words else float("nan")
        return {"loss": ratio(sums, "loss"), "wer": wer}

    def predict(self, model: nn.Module, batch: Batch) -> Tensor:
        """Per-frame probabilities (B, T', K) over blank + the alphabet."""
        return audio_forward(model, batch).softmax(dim=-1)

    def transcribe(self, model: nn.Module, batch: Batch) -> list[str]:
        """Greedy transcripts of a batch."""
        logits = audio_forward(model, batch)
        config = model_config(model)
        lengths = batch["attention_mask"].sum(dim=1)
        if config is not None:
            lengths = config.output_lengths(lengths)
        return [self.text(ids) for ids in ctc_greedy(logits, lengths)]
