"""Sequence to sequence with teacher forcing (tfam's encoder–decoder Transformer)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from tfam.training.tasks.base import IGNORE_INDEX, Batch, TokenTask

__all__ = ["Seq2Seq"]


class Seq2Seq(TokenTask):
    """Sequence to sequence with teacher forcing: ``model(src_ids (B, Ls), tgt_ids (B, Lt)) ->
    logits (B, Lt, V)`` that masks ``pad_id`` itself (tfam's encoder–decoder Transformer), and
    ``model.generate(src_ids, max_new_tokens=...)`` for :meth:`predict`.

    Items ``(src_ids (Ls,), tgt_ids (Lt,))`` with ``tgt_ids = [bos] + tokens + [eos]``;
    ``collate`` pads both sides with ``pad_id`` and shifts the target: batch ``{"src_ids" (B, Ls),
    "tgt_ids" (B, Lt - 1) = target[:, :-1], "labels" (B, Lt - 1) = target[:, 1:]}`` with label
    -100 on padding. A dataset with ``get_batch(indices)`` returning such items (or such a batch)
    is gathered in the main process; otherwise items go through the trainer's DataLoader.

    Training loss: cross-entropy with ``config.label_smoothing`` (PyTorch's definition: the
    target gets 1 - eps, every class eps / V), summed over real target tokens; ``count`` is the
    number of real target tokens, so accumulation and DDP give the mean per token of the global
    batch. Metrics (train and evaluation): ``loss`` (plain cross-entropy, nats per token),
    ``acc`` (token accuracy) and ``exact`` (the fraction of sequences whose every target token,
    eos included, is the argmax).

    ``exact`` is computed from the teacher-forced logits, and that *is* greedy decoding's exact
    match: greedy decoding feeds back its own argmax, so it reproduces the reference up to and
    including eos exactly when every teacher-forced argmax is right (and at its first wrong
    argmax it leaves the reference). So evaluation costs one forward per batch. With
    ``generate_eval=True`` evaluation also decodes greedily (``model.generate``, cached, at most
    the reference length + 1 new tokens: one decoder step per token, about as many forwards as
    target tokens) and counts ``gen_exact``: generated tokens up to eos equal to the reference.
    """

    name = "seq2seq"
    objective = "translate"
    metrics = ("loss", "acc", "exact")
    primary_metric = "loss"
    higher_is_better = False
    unit = "sentences"

    def __init__(
        self,
        pad_id: int = 0,
        eos_id: int | None = None,
        generate_eval: bool = False,
        max_new_tokens: int | None = None,
    ) -> None:
        self.pad_id = int(pad_id)
        self.eos_id = eos_id
        self.generate_eval = bool(generate_eval)
        if max_new_tokens is not None and (
            isinstance(max_new_tokens, bool)
            or not isinstance(max_new_tokens, int)
            or max_new_tokens < 1
        ):
            raise ValueError(f"max_new_tokens={max_new_tokens!r} is invalid: expected an int >= 1")
        self.max_new_tokens = max_new_tokens
        if self.generate_eval:
            self.metrics = ("loss", "acc", "exact", "gen_exact")

    @classmethod
    def for_dataset(cls, dataset: Any, **options: Any) -> Seq2Seq:
        """The task with the dataset's ``pad_token_id`` and ``eos_token_id`` (when it has them)."""
        return cls(
            pad_id=int(getattr(dataset, "pad_token_id", 0)),
            eos_id=getattr(dataset, "eos_token_id", None),
            **options,
        )

    # -- batches ------------------------------------------------------------------------------
    def collate(self, items: Sequence[Any]) -> Batch:
        src = [torch.as_tensor(item[0], dtype=torch.int64) for item in items]
        tgt = [torch.as_tensor(item[1], dtype=torch.int64) for item in items]
        if any(t.numel() < 2 for t in tgt):
            raise ValueError(
                "a target has fewer than 2 tokens: expected tgt_ids = [bos] + tokens + [eos]"
            )
        src_ids = nn.utils.rnn.pad_sequence(src, batch_first=True, padding_value=self.pad_id)
        target = nn.utils.rnn.pad_sequence(tgt, batch_first=True, padding_value=self.pad_id)
        labels = target[:, 1:].clone()
        # A real pad id inside a target cannot be told from padding; the model masks it anyway.
        labels[labels == self.pad_id] = IGNORE_INDEX
        return {"src_ids": src_ids, "tgt_ids": target[:, :-1], "labels": labels}

    # -- losses and metrics -------------------------------------------------------------------
    def _check_pad(self, model: nn.Module) -> None:
        # The model masks its own pad id; a different one here would count padding as tokens.
        config = getattr(getattr(model, "module", model), "config", None)
        pad = getattr(config, "pad_token_id", None)
        if pad is not None and int(pad) != self.pad_id:
            raise ValueError(
                f"pad_id={self.pad_id} of the seq2seq task is invalid for this model: its "
                f"config has pad_token_id={pad}; use the same padding id for data and model"
            )

    def training_batch(self, model: nn.Module, batch: Batch) -> Batch:
        self._check_pad(model)
        return batch

    def evaluation_batch(self, model: nn.Module, batch: Batch) -> Batch:
        self._check_pad(model)
        return batch

    def logits(self, model: nn.Module, batch: Batch) -> Tensor:
        return model(batch["src_ids"], batch["tgt_ids"]).float()

    def sums(self, logits: Tensor, labels: Tensor, loss: Tensor) -> dict[str, Tensor]:
        """TokenTask's sums, and whole sequences right (``exact``) of those counted
        (``seqs``)."""
        counted = labels != IGNORE_INDEX
        right = (logits.argmax(dim=-1) == labels) & counted
        rows = counted.any(dim=-1)
        whole = (right | ~counted).all(dim=-1) & rows
        return {
            "loss": loss.detach().double(),
            "correct": right.sum().double(),
            "count": counted.sum().double(),
            "exact": whole.sum().double(),
            "seqs": rows.sum().double(),
        }

    def eval_sums(self, model: nn.Module, batch: Batch) -> dict[str, Tensor]:
        sums = super().eval_sums(model, batch)
        if self.generate_eval:
            sums["gen_exact"] = self._generated_exact(model, batch)
        return sums

    def _generated_exact(self, model: nn.Module, batch: Batch) -> Tensor:
        """Sequences whose greedy decoding, up to eos, equals the reference (labels up to the
        first -100)."""
        labels = batch["labels"]
        generated = self.predict(model, batch, max_new_tokens=labels.shape[1])[:, 1:]
        eos = self._eos(model)
        hits = 0
        for row, ref in zip(generated.tolist(), labels.tolist()):
            ref = [t for t in ref if t != IGNORE_INDEX]
            if not ref:
                continue
            out = row[: row.index(eos) + 1] if eos is not None and eos in row else row
            hits += int(out == ref)
        return torch.tensor(float(hits), dtype=torch.float64, device=labels.device)

    def _eos(self, model: nn.Module) -> int | None:
        if self.eos_id is not None:
            return int(self.eos_id)
        config = getattr(getattr(model, "module", model), "config", None)
        eos = getattr(config, "eos_token_id", None)
        return None if eos is None else int(eos)

    def reduce(self, sums: dict[str, float]) -> dict[str, float]:
        seqs = sums.get("seqs", 0.0)
        out = super().reduce(sums)
        out["exact"] = sums.get("exact", 0.0) / seqs if seqs else float("nan")
        if self.generate_eval:
            # Training sums have no generation: NaN there.
            gen = sums.get("gen_exact")
            out["gen_exact"] = gen / seqs if gen is not None and seqs else float("nan")
        return out

    def predict(self, model: nn.Module, batch: Batch, max_new_tokens: int | None = None) -> Tensor:
        """Greedy decoding of ``batch["src_ids"]`` -> (B, 1 + new) ids: ``[bos]`` then the
        generated tokens, padded with the pad id after eos. New tokens: ``max_new_tokens``
        (argument, then the task's), else the labels' width when the batch has labels, else the
        source length + 10; never more than the model's ``max_positions`` - 1."""
        plain = getattr(model, "module", model)
        src = batch["src_ids"]
        n = max_new_tokens or self.max_new_tokens
        if n is None:
            n = batch["labels"].shape[1] if "labels" in batch else src.shape[1] + 10
        limit = getattr(getattr(plain, "config", None), "max_positions", None)
        if limit is not None:
            n = min(n, int(limit) - 1)
        kwargs: dict[str, Any] = {"max_new_tokens": int(n), "pad_token_id": self.pad_id}
        if self.eos_id is not None:
            kwargs["eos_token_id"] = int(self.eos_id)
        return plain.generate(src, **kwargs)
