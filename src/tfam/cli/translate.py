"""`tfam translate DIR TEXT...`: run an encoder–decoder run on sentences (or stdin lines).

The run is opened by :func:`tfam.runs.load_seq2seq`; checking, encoding, beam search and
decoding are :mod:`tfam.cli.text`'s, shared with eval, predict and viz."""

from __future__ import annotations

import argparse
import sys

from tfam.cli.common import (
    add_batch_size_option,
    add_command,
    add_device_option,
    add_texts_argument,
    device_from,
    read_texts,
)
from tfam.cli.text import add_decoding_options, check_decoding, translate_texts
from tfam.runs import load_seq2seq

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

HELP = "translate sentences (arguments or stdin) with a seq2seq run"
DESCRIPTION = (
    "Translate text with an encoder–decoder run: tokenize, beam search, decode; one output line "
    "per input sentence."
)


def register(subparsers: argparse._SubParsersAction) -> None:
    run_dir = "run directory: config.json, model.safetensors, tokenizer.json"
    p = add_command(subparsers, "translate", HELP, DESCRIPTION, EPILOG, run_dir=run_dir)
    add_texts_argument(p, "translate")
    add_decoding_options(p)
    add_batch_size_option(p, 32, "generate call")
    add_device_option(p)
    p.set_defaults(func=run)


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
