"""`tfam translate DIR TEXT...`: run an encoder–decoder run on sentences (or stdin lines).

The shared seq2seq side of the command line lives here too, so that `tfam eval`, `tfam predict`
and `tfam viz attention` treat a seq2seq run exactly as translate does: :func:`load_seq2seq`
(model + the tokenizer saved beside it, with one-line errors), :func:`encode_texts` (empty,
too long, unknown script) and :func:`translate_ids` (length-sorted batches, beam search).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfam.cli.common import (
    add_device_option,
    check_not_empty,
    device_from,
    read_texts,
    resolve_model,
)

TOKENIZER_FILE = "tokenizer.json"  # = tfam.data.tokenizer.TOKENIZER_FILE (not imported: startup)

EPILOG = """examples:
  tfam translate runs/kjv-rv "In the beginning God created the heaven and the earth."
  tfam translate runs/kjv-rv "And God said, Let there be light." --beam 8 --length-penalty 1.0
  tfam translate runs/kjv-rv < verses.txt > versos.txt      one translation per input line
  echo "a b c d" | tfam translate runs/copy -               a copy or reverse run works alike

DIR is a run directory of `tfam train` on a text-to-text dataset (e.g. `tfam train transformer
--data kjv-rv`): config.json, model.safetensors and the tokenizer.json that training saved
beside them. Beam search scores hypotheses by log-probability / ((5 + length) / 6) ** alpha
(GNMT's length penalty, alpha = --length-penalty; 0.6 in the Transformer paper). Output stops
at <eos> or after --max-new-tokens (default: source length + 50, as in the paper, within the
model's positions). A sentence longer than the model's positions is an error unless
--truncate is given.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "translate",
        help="translate sentences (arguments or stdin) with a seq2seq run",
        description=(
            "Translate text with an encoder–decoder run: tokenize, beam search, decode; one "
            "output line per input sentence."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "dir", metavar="DIR", help="run directory: config.json, model.safetensors, tokenizer.json"
    )
    p.add_argument(
        "texts",
        metavar="TEXT",
        nargs="*",
        help="sentences to translate; none or '-': read one sentence per line from stdin",
    )
    add_decoding_options(p)
    p.add_argument(
        "--batch-size",
        type=int,
        default=32,
        metavar="N",
        help="sentences per generate call (default: 32)",
    )
    add_device_option(p)
    p.set_defaults(func=run, trailing="texts")


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


# ---------------------------------------------------------------------------------------------
# Loading a seq2seq run


def is_seq2seq(model_or_class: Any) -> bool:
    """Whether a model (or model class) is an encoder–decoder that generates from a source:
    it encodes a source and decodes from it (``encode`` and ``generate``)."""
    return callable(getattr(model_or_class, "encode", None)) and callable(
        getattr(model_or_class, "generate", None)
    )


def run_is_seq2seq(source: Any) -> bool:
    """Whether the model directory of ``source`` (a :class:`~tfam.cli.common.ModelSource`)
    holds an encoder–decoder, judged from its family's class without loading weights."""
    from tfam.models import MODEL_CLASSES

    cls = MODEL_CLASSES.get(source.family)
    return cls is not None and is_seq2seq(cls)


def describe_run(run_dir: Path, family: str) -> str:
    """'a vit image-classification run (vit_digits on digits)': what a run directory holds,
    from its train_args.json and the dataset catalog, for error messages."""
    args: dict[str, Any] = {}
    try:
        loaded = json.loads((run_dir / "train_args.json").read_text())
        if isinstance(loaded, dict):
            args = loaded
    except (OSError, ValueError):
        pass
    task = ""
    data = args.get("data")
    if data:
        try:
            from tfam.data import resolve_data

            task = resolve_data(data).task
        except (ValueError, OSError):
            task = ""
    what = " ".join(x for x in (family or "model", task, "run") if x)
    article = "an" if what[:1].lower() in "aeiou" else "a"
    title = args.get("title")
    return f"{article} {what}" + (f" ({title})" if title else "")


@dataclass
class Seq2SeqRun:
    """A loaded seq2seq run: its directory, model (eval mode, on ``device``) and tokenizer."""

    run_dir: Path
    model: Any
    tokenizer: Any
    device: Any

    @property
    def max_positions(self) -> int:
        return int(self.model.config.max_positions)


def load_tokenizer(run_dir: Path) -> Any:
    """The tokenizer saved beside a run's model; a one-line error when there is none."""
    path = run_dir / TOKENIZER_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{run_dir} has no {TOKENIZER_FILE}: `tfam train` writes it beside the model when it "
            "trains on a text dataset (for a model saved from Python, save its tokenizer into "
            "the same directory with tokenizer.save(DIR))"
        )
    from tfam.data.tokenizer import load_tokenizer as load

    try:
        return load(run_dir)
    except (KeyError, TypeError) as err:  # readable JSON of the wrong shape
        raise ValueError(f"{path} is not a valid tokenizer file: {err!r}") from None


def load_seq2seq(dir_arg: str, device: Any, command: str) -> Seq2SeqRun:
    """The model and tokenizer of run directory ``dir_arg``, checked against each other.

    Errors (one line each): not a model directory, not an encoder–decoder (says what the run
    is), no tokenizer.json (says what writes it), tokenizer and model disagree."""
    source = resolve_model(dir_arg, what="DIR", kinds=("dir",))
    run_dir = Path(dir_arg)
    if not run_is_seq2seq(source):
        raise ValueError(
            f"{command} needs a seq2seq run (an encoder–decoder trained on text pairs, e.g. "
            f"`tfam train transformer --data kjv-rv`), but {run_dir} holds "
            f"{describe_run(run_dir, source.family)}"
        )
    tokenizer = load_tokenizer(run_dir)
    model = source.load(device)
    model.eval()
    c = model.config
    if tokenizer.vocab_size > c.vocab_size:
        raise ValueError(
            f"{run_dir / TOKENIZER_FILE} has {tokenizer.vocab_size} tokens but the model "
            f"only vocab_size={c.vocab_size}: the tokenizer is not the model's"
        )
    for name in ("pad", "bos", "eos"):
        ours, theirs = getattr(tokenizer, f"{name}_id"), getattr(c, f"{name}_token_id")
        if ours != theirs:
            raise ValueError(
                f"{run_dir / TOKENIZER_FILE} has {name}_id={ours} but the model "
                f"{name}_token_id={theirs}: the tokenizer is not the model's"
            )
    return Seq2SeqRun(run_dir, model, tokenizer, device)


# ---------------------------------------------------------------------------------------------
# Text in, ids in


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
# Ids in, text out


def default_max_new_tokens(source_len: int, max_positions: int) -> int:
    """The Transformer paper's output limit, input length + 50, within the decoder's positions
    (<bos> takes one)."""
    return max(1, min(source_len + 50, max_positions - 1))


def translate_ids(
    run: Seq2SeqRun,
    sources: Sequence[Sequence[int]],
    *,
    beam: int = 4,
    length_penalty: float = 0.6,
    max_new_tokens: int | None = None,
    batch_size: int = 32,
    progress: bool = False,
) -> list[list[int]]:
    """Generated target ids (without <bos>, cut before <eos>) of every source, in order.

    Sources are sorted by length and cut into batches, so padding (and the per-batch output
    limit) stays small; results come back in the input order."""
    import torch

    pad = run.tokenizer.pad_id
    eos = run.tokenizer.eos_id
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
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
            limit = (
                max_new_tokens
                if max_new_tokens is not None
                else default_max_new_tokens(longest, run.max_positions)
            )
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


def decode(run: Seq2SeqRun, ids: Iterable[int]) -> str:
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


def _warn(text: str) -> None:
    print(f"tfam: note: {text}", file=sys.stderr)


def translate_texts(
    run: Seq2SeqRun, texts: Sequence[str], names: Sequence[str], args: argparse.Namespace
) -> list[str]:
    """Check, encode, generate and decode ``texts`` with the decoding options of ``args``."""
    check_decoding(args, run.max_positions)
    sources = encode_texts(
        texts, names, run.tokenizer, run.max_positions, truncate=args.truncate, warn=_warn
    )
    outputs = translate_ids(
        run,
        sources,
        beam=args.beam,
        length_penalty=args.length_penalty,
        max_new_tokens=args.max_new_tokens,
        batch_size=getattr(args, "batch_size", 32),
        progress=True,
    )
    return [decode(run, ids) for ids in outputs]


def run(args: argparse.Namespace) -> int:
    # Cheap checks first: bad input fails before a model is loaded.
    texts, names = read_texts(args.texts, "translate", "a sentence to translate")
    check_decoding(args, max_positions=2**31)
    device = device_from(args)
    loaded = load_seq2seq(args.dir, device, "translate")
    for line in translate_texts(loaded, texts, names, args):
        print(line, flush=False)
    sys.stdout.flush()
    return 0
