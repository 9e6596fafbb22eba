"""Decoding one token at a time: greedy, sampling (temperature, top-k, top-p) and beam search,
with or without the KV cache. One code path for every generating family (the encoder–decoder
Transformer, GPT, iGPT): a family mixes in :class:`GenerationMixin` and implements two methods.

    state, start = model.prepare_decoding(input_ids, attention_mask, max_new_tokens, use_cache)
        # state: a DecodingState (cache, encoder memory, masks); start: (B, L0) ids the decoder
        # reads first ([<bos>] for the encoder–decoder, the prompt for GPT)
    logits = model.decode_step(state, ids)
        # ids (B, n): the new tokens (cached) or the whole sequence so far (uncached)
        # -> (B, V) scores of the next token

A decoder-only family with a fixed context says so with ``decoding_window()``: past it,
generation slides the window as nanoGPT crops its input. Each step then re-encodes the last
``window`` tokens without the cache (``DecodingState.slide``), which is exactly the reference
``model(ids[:, -window:])[:, -1]``. A rolling KV cache would not be: from the second layer on, a
cached key was computed from tokens that have since left the window, whatever the position
scheme (relative ones included), so it is a different model of the text.

Argument names follow Hugging Face's ``generate`` so its users feel at home.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from tfam.layers.cache import StackCache
from tfam.layers.kernels import AttentionKernel
from tfam.layers.position import PositionScheme


@dataclass
class DecodingState:
    """What a family keeps between decoding steps. Every tensor in ``extras`` is batch-first and
    is reordered with the beams; ``key_mask`` (B, L so far; True = real token) grows by one
    column per step, for left-padded prompts."""

    cache: StackCache | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    key_mask: Tensor | None = None

    def reorder(self, index: Tensor) -> None:
        if self.cache is not None:
            self.cache.reorder(index)
        self.extras = {
            k: v.index_select(0, index) if isinstance(v, Tensor) else v
            for k, v in self.extras.items()
        }
        if self.key_mask is not None:
            self.key_mask = self.key_mask.index_select(0, index)

    def slide(self, window: int) -> None:
        """Before a step that re-encodes the last ``window`` tokens (decoding past the context):
        the cache is dropped (the window's keys and values are recomputed at every step from
        here on, since the window moves at every step) and the key mask keeps its last
        ``window`` columns, None once no padding is left in them (as a family's forward treats
        an all-real mask)."""
        self.cache = None
        if self.key_mask is not None:
            mask = self.key_mask[:, -window:]
            self.key_mask = None if bool(mask.all()) else mask

    def grow(self, n: int = 1) -> None:
        if self.key_mask is not None:
            pad = self.key_mask.new_ones(self.key_mask.shape[0], n)
            self.key_mask = torch.cat([self.key_mask, pad], dim=1)


def _error(name: str, value: Any, valid: str) -> ValueError:
    return ValueError(f"{name}={value!r} is invalid: {valid}")


def check_generation_args(
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    num_beams: int,
    length_penalty: float,
) -> None:
    """Named errors for bad decoding settings."""
    if (
        not isinstance(max_new_tokens, int)
        or isinstance(max_new_tokens, bool)
        or max_new_tokens < 1
    ):
        raise _error("max_new_tokens", max_new_tokens, "expected an int >= 1")
    if not isinstance(temperature, int | float) or not temperature > 0 or math.isinf(temperature):
        raise _error("temperature", temperature, "expected a finite number > 0")
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1):
        raise _error("top_k", top_k, "expected None or an int >= 1")
    if top_p is not None and (not isinstance(top_p, int | float) or not 0 < top_p <= 1):
        raise _error("top_p", top_p, "expected None or a number in (0, 1]")
    if not isinstance(num_beams, int) or isinstance(num_beams, bool) or num_beams < 1:
        raise _error("num_beams", num_beams, "expected an int >= 1")
    if not isinstance(length_penalty, int | float) or not math.isfinite(length_penalty):
        raise _error("length_penalty", length_penalty, "expected a finite number")


def warp_logits(
    logits: Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> Tensor:
    """Temperature, then top-k, then top-p (nucleus: the smallest set of tokens whose
    probability reaches p; the most likely token always stays). (B, V) -> (B, V), removed
    tokens at -inf."""
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        # Remove a token when the tokens before it already reach top_p.
        remove = probs.cumsum(dim=-1) - probs >= top_p
        remove[..., 0] = False
        logits = logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
    return logits


def length_penalty_factor(length: int, alpha: float) -> float:
    """GNMT's length normalisation, used by the Transformer paper: ((5 + |Y|) / 6)^alpha."""
    return ((5.0 + length) / 6.0) ** alpha


class GenerationMixin(ABC):
    """``generate`` for a family that implements ``prepare_decoding`` and ``decode_step``
    (abstract: a family that mixes this in cannot be built without them)."""

    @abstractmethod
    def prepare_decoding(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None,
        max_new_tokens: int,
        use_cache: bool,
    ) -> tuple[DecodingState, Tensor]:
        """Encode what must be encoded once; -> (state, the decoder's start ids (B, L0))."""

    @abstractmethod
    def decode_step(self, state: DecodingState, ids: Tensor) -> Tensor:
        """ids (B, n) -> scores of the next token (B, V)."""

    def decoding_window(self) -> int | None:
        """The most tokens the decoder reads at one step (a decoder-only context), or None (no
        sliding: the default, and the encoder–decoder's). Generation past it re-encodes the
        last ``window`` tokens at each step."""
        return None

    def decodes_from_cache(self) -> bool:
        """Whether a KV cache can continue this model's decoding: False when one of its
        position schemes reads the tokens before the new ones (``incremental = False``, a
        recurrent position network); ``generate`` then re-encodes the sequence at every step,
        as with ``use_cache=False``. Likewise when an attention kernel refuses a cache (``lsh``:
        re-sorting every key at each step would cost O(n log n) a token)."""
        modules = list(self.modules()) if isinstance(self, torch.nn.Module) else []
        if any(
            "cache" in getattr(m, "refuses", {}) for m in modules if isinstance(m, AttentionKernel)
        ):
            return False
        return all(m.incremental for m in modules if isinstance(m, PositionScheme))

    def decoding_context(self) -> AbstractContextManager[None]:
        """Entered around the whole of one ``generate`` call (a family may lay its weights out
        for decoding there); the default does nothing."""
        return nullcontext()

    def _special(self, name: str, given: int | None) -> int | None:
        return given if given is not None else getattr(getattr(self, "config", None), name, None)

    @torch.no_grad()
    def generate(
        self,
        input_ids: Tensor,
        max_new_tokens: int = 20,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        num_beams: int = 1,
        length_penalty: float = 1.0,
        eos_token_id: int | list[int] | None = None,
        use_cache: bool = True,
        attention_mask: Tensor | None = None,
        pad_token_id: int | None = None,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """Decode up to ``max_new_tokens`` tokens.

        input_ids (B, L): the source (encoder–decoder) or the prompt (decoder-only; left-pad a
        batch of prompts and pass ``attention_mask``). Greedy by default; ``do_sample`` draws
        from the warped distribution (``temperature``, ``top_k``, ``top_p``; ``generator`` for
        reproducible draws); ``num_beams > 1`` runs beam search scored by log-probability over
        GNMT's length penalty with exponent ``length_penalty``. Decoding stops at
        ``eos_token_id`` (one id or a list; default: the config's), padding finished rows with
        ``pad_token_id``. -> (B, L0 + new) ids: the decoder's start ids (``[bos]`` or the
        prompt) followed by the generated tokens.
        """
        check_generation_args(max_new_tokens, temperature, top_k, top_p, num_beams, length_penalty)
        if do_sample and num_beams > 1:
            raise _error(
                "num_beams", num_beams, "beam search is deterministic: use do_sample=False"
            )
        eos = self._special(
            "eos_token_id", eos_token_id if not isinstance(eos_token_id, list) else None
        )
        eos_ids = (
            list(eos_token_id) if isinstance(eos_token_id, list) else ([] if eos is None else [eos])
        )
        pad = self._special("pad_token_id", pad_token_id)
        pad = pad if pad is not None else (eos_ids[0] if eos_ids else 0)
        use_cache = use_cache and self.decodes_from_cache()
        was_training = getattr(self, "training", False)
        self.eval()  # type: ignore[attr-defined]
        try:
            with self.decoding_context():
                state, start = self.prepare_decoding(
                    input_ids, attention_mask, max_new_tokens, use_cache
                )
                if num_beams > 1:
                    return self._beam_search(
                        state,
                        start,
                        max_new_tokens,
                        num_beams,
                        length_penalty,
                        eos_ids,
                        pad,
                        use_cache,
                    )
                return self._sample(
                    state,
                    start,
                    max_new_tokens,
                    do_sample,
                    temperature,
                    top_k,
                    top_p,
                    eos_ids,
                    pad,
                    use_cache,
                    generator,
                )
        finally:
            self.train(was_training)  # type: ignore[attr-defined]

    def _sample(
        self,
        state: DecodingState,
        seqs: Tensor,
        max_new_tokens: int,
        do_sample: bool,
        temperature: float,
        top_k: int | None,
        top_p: float | None,
        eos_ids: list[int],
        pad: int,
        use_cache: bool,
        generator: torch.Generator | None,
    ) -> Tensor:
        b, l0 = seqs.shape
        # The output is allocated once and filled column by column (a growing torch.cat would
        # copy the whole sequence at every step).
        out = seqs.new_empty(b, l0 + max_new_tokens)
        out[:, :l0] = seqs
        length = l0
        # Without stop tokens no row can finish: the per-step bookkeeping (and the host sync
        # of `finished.all()`) is skipped.
        eos_t = torch.tensor(eos_ids, dtype=seqs.dtype, device=seqs.device) if eos_ids else None
        finished = torch.zeros(b, dtype=torch.bool, device=seqs.device)
        step_in = seqs
        window = self.decoding_window()
        for _ in range(max_new_tokens):
            if window is not None and length > window:
                state.slide(window)  # past the context: re-encode its last `window` tokens
                logits = self.decode_step(state, out[:, length - window : length])
            else:
                logits = self.decode_step(state, step_in if use_cache else out[:, :length])
            if do_sample:
                probs = warp_logits(logits, temperature, top_k, top_p).softmax(dim=-1)
                token = torch.multinomial(probs, 1, generator=generator).squeeze(1)
            else:
                token = logits.argmax(dim=-1)
            if eos_t is not None:
                token = token.masked_fill(finished, pad)
            out[:, length] = token
            length += 1
            state.grow()
            if eos_t is not None:
                finished |= torch.isin(token, eos_t)
                if bool(finished.all()):
                    break
            step_in = out[:, length - 1 : length]
        return out[:, :length].contiguous()  # a copy only when decoding stopped early

    def _beam_search(
        self,
        state: DecodingState,
        start: Tensor,
        max_new_tokens: int,
        k: int,
        alpha: float,
        eos_ids: list[int],
        pad: int,
        use_cache: bool,
    ) -> Tensor:
        """Beam search that stops only when no unfinished beam can still beat the worst of the
        k best finished ones — a length penalty can raise a longer hypothesis' score, so
        "k hypotheses finished" alone is not enough (a trap of some libraries)."""
        b, l0 = start.shape
        device = start.device
        index = torch.arange(b, device=device).repeat_interleave(k)
        state.reorder(index)
        seqs = start.index_select(0, index)  # (B*K, L)
        scores = torch.full((b, k), float("-inf"), dtype=torch.float64, device=device)
        scores[:, 0] = 0.0  # every beam starts identical: expand from the first one only
        finished: list[list[tuple[float, Tensor]]] = [[] for _ in range(b)]
        done = [False] * b
        eos_set = set(eos_ids)
        step_in = seqs
        window = self.decoding_window()
        for step in range(1, max_new_tokens + 1):
            if window is not None and seqs.shape[1] > window:
                state.slide(window)  # past the context: re-encode its last `window` tokens
                logits = self.decode_step(state, seqs[:, -window:])
            else:
                logits = self.decode_step(state, step_in if use_cache else seqs)
            logp = torch.log_softmax(logits.double(), dim=-1)  # (B*K, V)
            vocab = logp.shape[-1]
            cand = (scores.reshape(-1, 1) + logp).view(b, k * vocab)
            top_scores, top_idx = cand.topk(min(2 * k, k * vocab), dim=-1)
            new_scores = torch.full((b, k), float("-inf"), dtype=torch.float64, device=device)
            parent = torch.zeros(b, k, dtype=torch.long, device=device)
            tokens = torch.full((b, k), pad, dtype=seqs.dtype, device=device)
            lp = length_penalty_factor(step, alpha)
            for i in range(b):
                if done[i]:
                    continue
                kept = 0
                for s, flat in zip(top_scores[i].tolist(), top_idx[i].tolist()):
                    if s == float("-inf"):
                        break
                    beam, token = divmod(flat, vocab)
                    if token in eos_set:
                        hyp = torch.cat([seqs[i * k + beam], seqs.new_tensor([token])])
                        finished[i].append((s / lp, hyp))
                        continue
                    new_scores[i, kept], parent[i, kept], tokens[i, kept] = s, beam, token
                    kept += 1
                    if kept == k:
                        break
                finished[i] = sorted(finished[i], key=lambda h: -h[0])[:k]
                done[i] = self._beam_done(
                    finished[i], new_scores[i], k, step, max_new_tokens, alpha
                )
            if all(done):
                break
            order = (torch.arange(b, device=device)[:, None] * k + parent).reshape(-1)
            state.reorder(order)
            seqs = torch.cat([seqs.index_select(0, order), tokens.reshape(-1, 1)], dim=1)
            scores = new_scores
            state.grow()
            step_in = tokens.reshape(-1, 1)
        # Rows still open at max_new_tokens: their alive beams compete as they stand.
        lp = length_penalty_factor(seqs.shape[1] - l0, alpha)
        for i in range(b):
            if not done[i]:
                for j in range(k):
                    if scores[i, j] > float("-inf"):
                        finished[i].append((float(scores[i, j]) / lp, seqs[i * k + j]))
                finished[i].sort(key=lambda h: -h[0])
        best = [finished[i][0][1] for i in range(b)]
        width = max(len(s) for s in best)
        out = torch.full((b, width), pad, dtype=start.dtype, device=device)
        for i, s in enumerate(best):
            out[i, : len(s)] = s
        return out

    @staticmethod
    def _beam_done(
        finished: list[tuple[float, Tensor]],
        alive: Tensor,
        k: int,
        step: int,
        max_new_tokens: int,
        alpha: float,
    ) -> bool:
        """True when the k best finished hypotheses cannot be beaten by any alive beam."""
        best_alive = float(alive.max())
        if best_alive == float("-inf"):
            return True  # every candidate ended
        if len(finished) < k:
            return False
        # An alive beam's log-probability can only fall; its normalised score is highest if it
        # gains no more log-probability and is divided by the largest penalty it can reach.
        horizon = max_new_tokens if alpha > 0 else step
        bound = best_alive / length_penalty_factor(horizon, alpha)
        return finished[-1][0] >= bound


__all__ = [
    "DecodingState",
    "GenerationMixin",
    "check_generation_args",
    "length_penalty_factor",
    "warp_logits",
]
