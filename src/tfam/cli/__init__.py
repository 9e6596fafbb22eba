"""The `tfam` command: one subcommand per module in this package.

Each module exposes ``register(subparsers)`` (adds its parser, with an example in the epilog,
and sets ``func=run``) and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from typing import Any, TextIO

# Subcommand modules, in the order `tfam --help` lists them.
COMMAND_MODULES = [
    "list",
    "explain",
    "train",
    "eval",
    "predict",
    "translate",
    "generate",
    "embed",
    "viz",
    "bench",
    "study",
    "convert",
]

EPILOG = """examples:
  tfam list 'vit*'                                 presets with their sizes
  tfam explain vit_base_patch16_224                step-by-step shapes, parameters, FLOPs
  tfam train vit --data digits --out runs/digits   train a ViT on real images
  tfam train vit --data photos/ --set patch_size=4  ... or on your own image folder
  tfam eval runs/digits                            accuracy, per-class table, confusion matrix
  tfam viz attention runs/digits digit.png --out attention.png
  tfam train transformer --data kjv-rv --out runs/kjv-rv   English -> Spanish translation
  tfam translate runs/kjv-rv "In the beginning God created the heaven and the earth."
  tfam eval runs/kjv-rv                            sacreBLEU and chrF on held-out books
  tfam viz attention runs/kjv-rv "Let there be light." --out align.png   cross-attention
  tfam train bert --task sentiment --init minilm_l6   fine-tune the packaged MiniLM
  tfam predict runs/sentiment "A fine, moving film."   class probabilities (--tags: a tagger)
  tfam train gpt --data kjv --out runs/kjv             a character-level GPT on the KJV
  tfam generate runs/kjv --prompt "And God said" --top-p 0.9 --seed 0
  tfam embed minilm_l6 "A fine film." --normalize     a sentence embedding (384 numbers)
  tfam convert hf-to-tfam hf/gpt2 runs/gpt2           HF <-> tfam (ViT, DeiT, Swin, ResNet, BERT,
                                                   GPT-2, ImageGPT, Marian), checked
  tfam bench attention --kernels math,sdpa,chunked --lengths 1024,4096,16384 --out runs/bench
                                                   time and memory of each kernel against n
  tfam study positions --profile quick --out runs/study-positions
                                                   a claim of the source documents, measured
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfam",
        description="The Transformer family: train, run, compare and understand Transformers.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from tfam import __version__

    parser.add_argument("--version", action="version", version=f"tfam {__version__}")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")
    for name in COMMAND_MODULES:
        module = importlib.import_module(
            f"tfam.cli.{name}_cmd" if name == "list" else f"tfam.cli.{name}"
        )
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # argparse stops filling a nargs='*' positional at the first option, so `tfam translate DIR
    # --beam 4 "text"` would leave "text" over; a command that names such a positional
    # (`set_defaults(trailing=...)`) takes the words that follow its options too.
    trailing = getattr(args, "trailing", None)
    if extra and trailing and not any(e.startswith("-") and e != "-" for e in extra):
        setattr(args, trailing, list(getattr(args, trailing) or []) + extra)
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for relaunching (--nproc)
    # Python warnings (ours and the libraries') print as `tfam: warning: ...` lines, not as
    # "file:line: UserWarning: ..." with a source line; restored when main returns.
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as err:
        # Bad input is the user's to fix: say what is wrong, without a traceback. The
        # trainer's errors (non-finite loss, a locked run, a failed save) are ValueErrors too.
        print(f"tfam: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `tfam explain ... | head`: the reader left; that is not an error. (Before OSError,
        # its base class.) Point stdout at /dev/null so the exit-time flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as err:
        if err.filename is None:
            raise
        # A file the system refused (permission, disk full, a file where a folder belongs).
        reason = err.strerror or type(err).__name__
        print(f"tfam: error: {err.filename}: {reason}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tfam: interrupted", file=sys.stderr)
        return 130


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """warnings.showwarning for the CLI: one `tfam: warning: <message>` line on stderr."""
    stream: Any = file if file is not None else sys.stderr
    try:
        print(f"tfam: warning: {_one_line(message)}", file=stream)
    except OSError:
        pass  # stderr closed: a warning must not become an error


def _one_line(err: BaseException | str) -> str:
    """The message of ``err`` on one line (the lines of a multi-line message joined)."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    if lines and lines[0].startswith("Caught ") and "DataLoader worker" in lines[0]:
        # Re-raised from a DataLoader worker: torch puts the worker's traceback in the
        # message; its last line is the error itself ("ValueError: image ... cannot be read").
        return lines[-1].split(": ", 1)[-1]
    return " ".join(lines) if lines else type(err).__name__


if __name__ == "__main__":
    sys.exit(main())
