"""What the text subcommands share (translate, generate, embed, predict, eval and viz on text
runs): one-line errors for text a tokenizer cannot encode, notes on stderr, and the seq2seq
side (decoding options, sources to ids, length-sorted batched generation, ids to text), so that
`tfam eval`, `tfam predict` and `tfam viz attention` treat a seq2seq run exactly as translate
does. Opening a run directory (its model, tokenizer, labels and task) is :mod:`tfam.runs`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tfam.cli.common import check_not_empty, note


def note_outputs(
    outputs: Sequence[Sequence[int]],
    texts: Sequence[str] | None = None,
    what: str = "output",
    tokenizer: Any = None,
) -> str | None:
    """One ``tfam: note:`` when outputs (generated ids, and their decoded ``texts``) are empty
    or one token repeated (:func:`tfam.training.sanity.output_problem`): the problem of the
    first such output, how many there are, and what to try (a repeated id shown as its text
    when ``tokenizer`` is given). Returns the note (None: none)."""
    from tfam.training.sanity import output_note, output_problem

    problems = []
    for i, ids in enumerate(outputs):
        text = texts[i] if texts is not None else None
        label = (lambda i: tokenizer.decode([i])) if tokenizer is not None else None
        problem = output_problem(ids, text, what=f"the {what}", label=label)
        if problem is not None:
            problems.append(problem)
    if not problems:
        return None
    text = output_note(problems[0], len(problems), len(outputs))
    note(text)
    return text


# ---------------------------------------------------------------------------------------------
# Sentences in


def unknown_characters(tokenizer: Any, text: str) -> list[str]:
    """The characters of ``text`` that ``tokenizer`` turns into its unknown token, in order of
    first appearance (whitespace is never reported: tokenizers normalise it)."""
    unk = getattr(tokenizer, "unk_id", None)
    if unk is None:
        return []
    seen: list[str] = []
    for ch in dict.fromkeys(text):
        if ch.isspace():
            continue
        if unk in tokenizer.encode(ch):
            seen.append(ch)
    return seen


def check_encodable(tokenizer: Any, text: str, ids: Sequence[int], name: str) -> None:
    """A one-line error when ``ids`` (the encoding of ``text``) holds the unknown token."""
    unk = getattr(tokenizer, "unk_id", None)
    if unk is None or unk not in ids:
        return
    chars = unknown_characters(tokenizer, text)
    if chars:
        shown = ", ".join(f"{c!r} (U+{ord(c):04X})" for c in chars[:8])
        more = f" and {len(chars) - 8} more" if len(chars) > 8 else ""
        raise ValueError(
            f"{name} holds characters the tokenizer cannot encode: {shown}{more} (the "
            f"tokenizer knows {tokenizer.vocab_size} ids; it was built from the training text)"
        )
    raise ValueError(f"{name} holds text the tokenizer cannot encode (it becomes <unk>)")


# ---------------------------------------------------------------------------------------------
# Seq2seq: options, text in, ids in


def add_decoding_options(
    p: argparse.ArgumentParser, beam: int = 4, truncate: bool = True, what: str = "sentence"
) -> None:
    """--beam, --length-penalty, --max-new-tokens and (``truncate``) --truncate: the decoding
    options of translate, eval and predict."""
    p.add_argument(
        "--beam",
        type=int,
        default=beam,
        metavar="N",
        help=f"beam size; 1 = greedy (default: {beam})",
    )
    p.add_argument(
        "--length-penalty",
        type=float,
        default=0.6,
        metavar="ALPHA",
        help="beam search length penalty exponent alpha (default: 0.6, the paper's)",
    )
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        metavar="N",
        help=f"most tokens to generate per {what} (default: source length + 50, within the "
        "model's positions)",
    )
    if truncate:
        p.add_argument(
            "--truncate",
            action="store_true",
            help=f"cut a {what} longer than the model's positions instead of failing",
        )


def encode_texts(
    texts: Sequence[str],
    names: Sequence[str],
    tokenizer: Any,
    max_positions: int,
    *,
    truncate: bool,
    warn: Callable[[str], None] | None = None,
) -> list[list[int]]:
    """Source ids (tokens + <eos>, as training built them) of every text.

    Empty or whitespace-only text and text longer than the model's positions (unless
    ``truncate``) are one-line ValueErrors; pieces the tokenizer has never seen become <unk>
    (a note through ``warn``), never a crash."""
    check_not_empty(texts, names, "a sentence to translate")
    out = []
    for text, name in zip(texts, names):
        ids = list(tokenizer.encode(text))
        limit = max_positions - 1  # room for <eos>
        if len(ids) > limit:
            if not truncate:
                raise ValueError(
                    f"{name} is {len(ids)} tokens long, but the model reads at most {limit} "
                    f"(+ <eos> = max_positions {max_positions}); shorten it, or pass --truncate "
                    f"to keep the first {limit} tokens"
                )
            if warn:
                warn(f"{name}: {len(ids)} tokens, truncated to the first {limit}")
            ids = ids[:limit]
        unk = getattr(tokenizer, "unk_id", None)
        unknown = sum(1 for i in ids if i == unk) if unk is not None else 0
        if unknown and warn:
            warn(
                f"{name}: {unknown} of {len(ids)} pieces are unknown to the tokenizer (<unk>): "
                "text in a script or alphabet it was not trained on"
            )
        out.append(ids + [tokenizer.eos_id])
    return out


def check_decoding(args: argparse.Namespace, max_positions: int) -> None:
    """One-line errors for --beam, --length-penalty, --max-new-tokens, --batch-size."""
    import math

    if args.beam < 1:
        raise ValueError(f"--beam {args.beam} is invalid: expected an int >= 1 (1 = greedy)")
    if not math.isfinite(args.length_penalty):
        raise ValueError(f"--length-penalty {args.length_penalty} is invalid: expected a number")
    if args.max_new_tokens is not None and not 1 <= args.max_new_tokens < max_positions:
        raise ValueError(
            f"--max-new-tokens {args.max_new_tokens} is invalid: expected 1..{max_positions - 1} "
            f"(the decoder has max_positions={max_positions}, and <bos> takes one)"
        )
    if getattr(args, "batch_size", 1) < 1:
        raise ValueError(f"--batch-size {args.batch_size} is invalid: expected an int >= 1")


# ---------------------------------------------------------------------------------------------
# Seq2seq: ids in, text out


def default_max_new_tokens(source_len: int, max_positions: int) -> int:
    """The Transformer paper's output limit, input length + 50, within the decoder's positions
    (<bos> takes one)."""
    return max(1, min(source_len + 50, max_positions - 1))


# Decoding budget: sentences x beams x (source + output limit) tokens per generate call, so
# the caches (keys and values of every decoder layer, (B * beams, H, L, Dh) each) stay bounded
# whatever the sentence lengths: 32768 tokens are 67 MB per layer at D = 256.
DECODE_TOKENS = 32768


def decode_batches(
    lengths: Sequence[int],
    limit: Callable[[int], int],
    *,
    beam: int = 1,
    batch_size: int = 32,
    batch_tokens: int = DECODE_TOKENS,
) -> list[list[int]]:
    """Indices of the sources in generate calls: sorted by length (stably), at most
    ``batch_size`` sentences a call, and sentences x ``beam`` x (longest source + its output
    limit ``limit(longest)``) <= ``batch_tokens`` (one sentence alone may exceed it)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    for i in order:
        if batches:
            last = batches[-1]
            longest = lengths[i]  # sorted: the newcomer is the longest
            size = (len(last) + 1) * beam * (longest + limit(longest))
            if len(last) < batch_size and size <= batch_tokens:
                last.append(i)
                continue
        batches.append([i])
    return batches


def translate_ids(
    run: Any,
    sources: Sequence[Sequence[int]],
    *,
    beam: int = 4,
    length_penalty: float = 0.6,
    max_new_tokens: int | None = None,
    batch_size: int = 32,
    batch_tokens: int = DECODE_TOKENS,
    progress: bool = False,
) -> list[list[int]]:
    """Generated target ids (without <bos>, cut before <eos>) of every source, in order.

    Sources are sorted by length and cut into batches of at most ``batch_size`` sentences and
    ``batch_tokens`` decoding tokens (:func:`decode_batches`), so padding (and the per-batch
    output limit) stays small and memory bounded; results come back in the input order (a
    source's beam search does not depend on its batch)."""
    import torch

    pad = run.tokenizer.pad_id
    eos = run.tokenizer.eos_id

    def output_limit(longest: int) -> int:
        if max_new_tokens is not None:
            return max_new_tokens
        return default_max_new_tokens(longest, run.max_positions)

    batches = decode_batches(
        [len(s) for s in sources],
        output_limit,
        beam=beam,
        batch_size=batch_size,
        batch_tokens=batch_tokens,
    )
    results: list[list[int]] = [[] for _ in sources]
    bar = None
    if progress and len(batches) > 1:
        from tqdm import tqdm

        # Only on a terminal (disable=None): logs and pipes stay clean.
        bar = tqdm(total=len(sources), unit="sent", file=sys.stderr, disable=None, leave=False)
    try:
        for idx in batches:
            longest = max(len(sources[i]) for i in idx)
            src = torch.full((len(idx), longest), pad, dtype=torch.long)
            for row, i in enumerate(idx):
                src[row, : len(sources[i])] = torch.tensor(list(sources[i]), dtype=torch.long)
            limit = output_limit(longest)
            with torch.inference_mode():
                out = run.model.generate(
                    src.to(run.device),
                    max_new_tokens=limit,
                    num_beams=beam,
                    length_penalty=length_penalty,
                )
            for row, i in enumerate(idx):
                ids = out[row, 1:].tolist()  # drop <bos>
                if eos in ids:
                    ids = ids[: ids.index(eos)]
                results[i] = [t for t in ids if t != pad]
            if bar is not None:
                bar.update(len(idx))
    finally:
        if bar is not None:
            bar.close()
    return results


def decode(run: Any, ids: Iterable[int]) -> str:
    return run.tokenizer.decode(list(ids))


def token_labels(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """One readable label per id, for plots: the tokenizer's piece (``id_to_token``) when it
    has one, else the id decoded alone; specials as <pad>, <bos>, <eos>, <unk>."""
    specials = {getattr(tokenizer, f"{n}_id", None): f"<{n}>" for n in ("pad", "bos", "eos", "unk")}
    piece = getattr(tokenizer, "id_to_token", None)
    out = []
    for i in ids:
        if i in specials:
            out.append(specials[i])
            continue
        text = piece(i) if callable(piece) else None
        if text is None:
            text = tokenizer.decode([i])
        text = str(text)
        # A piece that is only whitespace would be an invisible tick label.
        out.append(text if text.strip() else "␣" if text else f"#{i}")
    return out


def translate_texts(
    run: Any, texts: Sequence[str], names: Sequence[str], args: argparse.Namespace
) -> list[str]:
    """Check, encode, generate and decode ``texts`` with the decoding options of ``args``."""
    check_decoding(args, run.max_positions)
    sources = encode_texts(
        texts, names, run.tokenizer, run.max_positions, truncate=args.truncate, warn=note
    )
    return translate_sources(run, sources, args)


def translate_sources(
    run: Any, sources: Sequence[Sequence[int]], args: argparse.Namespace
) -> list[str]:
    """The decoded translations of source ids, with the decoding options of ``args`` (a
    progress bar on a terminal)."""
    outputs = translate_ids(
        run,
        sources,
        beam=args.beam,
        length_penalty=args.length_penalty,
        max_new_tokens=args.max_new_tokens,
        batch_size=getattr(args, "batch_size", 32),
        progress=True,
    )
    texts = [decode(run, ids) for ids in outputs]
    note_outputs(outputs, texts, "translation", run.tokenizer)
    return texts
