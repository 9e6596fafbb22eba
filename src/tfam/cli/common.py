"""What every subcommand shares: the one ``--set`` typing rule, options built from dataclass
fields, the one "preset, family or model directory" resolver, devices and thread counts, the
image options of predict and viz, and the sentences a text command reads (arguments or
stdin)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import types
import typing
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from tfam import runs

__all__ = [
    "layer_index",
    "RUN_DIR_HELP",
    "ModelSource",
    "add_batch_size_option",
    "add_command",
    "add_texts_argument",
    "add_dataclass_options",
    "add_device_option",
    "add_image_options",
    "check_not_empty",
    "check_utf8",
    "check_threads",
    "eval_split",
    "field_option",
    "image_options",
    "none_as_text",
    "note",
    "note_chance",
    "option_error",
    "parse_pair",
    "parse_set",
    "parse_sets",
    "parse_value",
    "read_texts",
    "resolve_device",
    "resolve_model",
]

_PAIR_HELP = "HEIGHTxWIDTH or one int, e.g. 8x12 or 224"
_PAIR = re.compile(r"\s*(\d+)\s*[xX]\s*(\d+)\s*")


# ---------------------------------------------------------------------------------------------
# Values


def parse_pair(text: str) -> int | tuple[int, int]:
    """'224' -> 224, '8x12' -> (8, 12) (height x width); an argparse ``type``."""
    m = re.fullmatch(r"\s*(\d+)\s*(?:[xX,]\s*(\d+)\s*)?", text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: expected {_PAIR_HELP}")
    return int(m[1]) if m[2] is None else (int(m[1]), int(m[2]))


def parse_value(text: str) -> Any:
    """The one typing rule of ``--set`` values: ``true``/``false`` -> bool, ``none``/``null`` ->
    None, ``8x12`` -> (8, 12), JSON numbers -> int or float, JSON lists and objects (which must
    be valid JSON: ``[8, 8]``, ``{"window": 4}``), anything else -> the string itself."""
    s = text.strip()
    low = s.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    m = _PAIR.fullmatch(s)
    if m:
        return int(m[1]), int(m[2])
    try:
        return json.loads(s)
    except json.JSONDecodeError as err:
        if s[:1] in "[{":
            raise ValueError(f"{s!r} is not valid JSON ({err.msg} at column {err.colno})") from None
        return s


def parse_set(item: str) -> tuple[str, Any]:
    """``"dim=64"`` -> ("dim", 64); ``-`` in the key becomes ``_``; values by
    :func:`parse_value`."""
    key, sep, raw = item.partition("=")
    key = key.strip().replace("-", "_")
    if not sep or not key.isidentifier():
        raise ValueError(f"--set {item!r} is invalid: expected KEY=VALUE, e.g. --set dim=64")
    try:
        return key, parse_value(raw)
    except ValueError as err:
        raise ValueError(f"--set {item!r} is invalid: {err}") from None


def parse_sets(
    items: Iterable[str] | None, fields: Iterable[str] | None = None, owner: str = "the config"
) -> dict[str, Any]:
    """Every ``--set KEY=VALUE`` as a dict (a later key wins); with ``fields``, a key that is not
    one of them is an error naming ``owner`` and the valid fields."""
    valid = set(fields) if fields is not None else None
    out: dict[str, Any] = {}
    for item in items or ():
        key, value = parse_set(item)
        if valid is not None and key not in valid:
            raise ValueError(
                f"--set {item!r} is invalid: {key!r} is not a field of {owner}; valid fields: "
                f"{', '.join(sorted(valid))}"
            )
        out[key] = value
    return out


def none_as_text(values: dict[str, Any], cls: type) -> dict[str, Any]:
    """``--set KEY=none`` for a field typed plain ``str`` is the string ``'none'`` (a position
    scheme, a norm), since None is no valid value there; a field that may be None
    (``str | None``, ``int | None``) keeps None. ``values`` from :func:`parse_sets`."""
    hints = typing.get_type_hints(cls)
    return {
        key: "none" if value is None and hints.get(key) is str else value
        for key, value in values.items()
    }


# ---------------------------------------------------------------------------------------------
# Options from dataclass fields


def field_option(name: str) -> str:
    """The command-line option of a field: ``min_lr`` -> ``--min-lr``."""
    return "--" + name.replace("_", "-")


def _strip_optional(hint: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = len(args) < len(typing.get_args(hint))
        return (args[0] if len(args) == 1 else typing.Union[tuple(args)]), optional  # noqa: UP007
    return hint, False


def _optional(convert: Any) -> Any:
    def parse(text: str) -> Any:
        return None if text.strip().lower() in ("none", "null") else convert(text)

    parse.__name__ = getattr(convert, "__name__", "value")
    return parse


def _typed_value(text: str) -> Any:
    try:
        return parse_value(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


_typed_value.__name__ = "value"


def _is_pair(hint: Any) -> bool:
    """``int | tuple[int, int]``: one int or a (height, width) pair."""
    if typing.get_origin(hint) not in (typing.Union, types.UnionType):
        return False
    args = typing.get_args(hint)
    return int in args and any(
        typing.get_origin(a) is tuple and typing.get_args(a) == (int, int) for a in args
    )


def _argument(hint: Any, default: Any) -> dict[str, Any]:
    """argparse keyword arguments for a field of type ``hint``."""
    hint, optional = _strip_optional(hint)
    if hint is Any and isinstance(default, int) and not isinstance(default, bool):
        # An untyped field with an int default (ViTConfig's image_size: "int or (height,
        # width)") takes what the config takes: one int or HxW.
        return {"type": parse_pair, "metavar": "HxW"}
    if _is_pair(hint):
        return {"type": parse_pair, "metavar": "HxW"}
    if hint is bool:
        return {"action": argparse.BooleanOptionalAction}
    if typing.get_origin(hint) is Literal:
        choices = typing.get_args(hint)
        return {"choices": choices, "type": type(choices[0])}
    if hint in (int, float, str):
        return {"type": _optional(hint) if optional else hint}
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        if args and Ellipsis not in args and len(set(args)) == 1 and args[0] in (int, float):
            return {"type": args[0], "nargs": len(args)}
    return {"type": _typed_value}  # unions, lists, dicts: the --set typing rule


def _default_text(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return ""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple):
        return " ".join(map(str, value))
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def add_dataclass_options(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    *,
    skip: Iterable[str] = (),
    note: dict[str, str] | None = None,
    show_defaults: bool = True,
    help_fallback: str = "",
) -> dict[str, str]:
    """One option per field of dataclass ``cls``: ``--field-name``, typed from the field's type
    (bool: ``--x/--no-x``; ``X | None`` also takes ``none``; fixed tuples: N values; Literal:
    choices; anything else: the ``--set`` typing rule), help from ``metadata["help"]`` with the
    default, ``metadata["metavar"]``/``["choices"]`` when given. An option not given leaves no
    attribute on the namespace (``argparse.SUPPRESS``), so callers can layer defaults and a
    given ``none`` stays None. Returns {field name: option}."""
    hints = typing.get_type_hints(cls)
    existing = set(getattr(parser, "_option_string_actions", {}))
    if isinstance(parser, argparse._ArgumentGroup):
        existing |= set(parser._option_string_actions)
    added: dict[str, str] = {}
    for f in dataclasses.fields(cls):
        option = field_option(f.name)
        if f.name in skip or not f.init or option in existing:
            continue
        kwargs = _argument(hints.get(f.name, str), f.default)
        meta = f.metadata or {}
        if "choices" in meta:
            kwargs["choices"] = tuple(meta["choices"])
        if "metavar" in meta and kwargs.get("action") is None:
            kwargs["metavar"] = meta["metavar"]
        elif kwargs.get("action") is None and "choices" not in kwargs and "metavar" not in kwargs:
            kwargs["metavar"] = f.name.upper()
        help_text = str(meta.get("help", help_fallback.format(name=f.name))).rstrip(".")
        default = (note or {}).get(f.name) or (_default_text(f) if show_defaults else "")
        if default:
            help_text = f"{help_text} (default: {default})" if help_text else f"default: {default}"
        parser.add_argument(
            option, dest=f.name, default=argparse.SUPPRESS, help=help_text, **kwargs
        )
        added[f.name] = option
    return added


_FIELD_ERROR = re.compile(r"^(\w+)=(.*?) is invalid(.*)$", re.S)


def option_error(
    err: Exception, options: dict[str, str], sources: dict[str, str] | None = None
) -> ValueError:
    """A config's ``"field=value is invalid: ..."`` said as the option: ``"--field value is
    invalid: ..."``, with where the value came from when the user did not give it."""
    text = str(err)
    m = _FIELD_ERROR.match(text)
    if not m or m[1] not in options:
        return ValueError(text)
    where = (sources or {}).get(m[1])
    tail = f" (the value came from {where}; give {options[m[1]]} to change it)" if where else ""
    return ValueError(f"{options[m[1]]} {m[2]} is invalid{m[3]}{tail}")


# ---------------------------------------------------------------------------------------------
# Models: a preset, a family or a model directory (the resolver lives with the run directories)

ModelSource = runs.ModelSource
resolve_model = runs.resolve_model


# ---------------------------------------------------------------------------------------------
# Devices and threads


def resolve_device(spec: str) -> Any:
    """``auto|cpu|cuda|cuda:N|mps`` -> torch.device (tfam.training.devices), a one-line
    ValueError naming the device and what is available when it is not there."""
    from tfam.training.devices import resolve_device as resolve

    return resolve(spec)


# The DIR of the commands that open any trained run (eval, predict).
RUN_DIR_HELP = "run directory: config.json, model.safetensors, preprocess.json"


def add_command(
    subparsers: Any,
    name: str,
    help: str,
    description: str,
    epilog: str,
    *,
    run_dir: str | None = None,
) -> argparse.ArgumentParser:
    """A subcommand's parser: its one-line ``help`` in the command list, its ``description``
    and its ``epilog``, whose examples print as written; with ``run_dir`` (that argument's
    help), the positional DIR of a command that opens a run directory (``args.dir``)."""
    parser = subparsers.add_parser(
        name,
        help=help,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if run_dir is not None:
        parser.add_argument("dir", metavar="DIR", help=run_dir)
    return parser


def add_texts_argument(parser: argparse.ArgumentParser, verb: str) -> None:
    """The positional TEXT... of a command that reads sentences with :func:`read_texts`
    (``args.texts``); the words after the options are taken too (``trailing``)."""
    parser.add_argument(
        "texts",
        metavar="TEXT",
        nargs="*",
        help=f"sentences to {verb}; none or '-': read one sentence per line from stdin",
    )
    parser.set_defaults(trailing="texts")


def add_batch_size_option(parser: argparse.ArgumentParser, default: int, per: str) -> None:
    """--batch-size N: sentences per ``per`` (e.g. "forward pass")."""
    parser.add_argument(
        "--batch-size",
        type=int,
        default=default,
        metavar="N",
        help=f"sentences per {per} (default: {default})",
    )


def add_device_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        default="auto",
        metavar="DEVICE",
        help="auto, cpu, cuda, cuda:N or mps (default: auto, CUDA when present)",
    )


def device_from(args: argparse.Namespace) -> Any:
    try:
        return resolve_device(args.device)
    except ValueError as err:
        m = _FIELD_ERROR.match(str(err))
        raise (ValueError(f"--device {m[2]} is invalid{m[3]}") if m else err) from None


def max_threads() -> int:
    """The most CPU threads a command accepts: four per core this machine has."""
    return 4 * (os.cpu_count() or 1)


def check_threads(threads: Any, option: str = "--threads") -> int:
    """``threads`` as an int in 1..max_threads() (torch crashes on absurd counts)."""
    limit = max_threads()
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= limit:
        raise ValueError(
            f"{option} {threads!r} is invalid: expected an int in 1..{limit} "
            f"(this machine has {os.cpu_count()} CPU cores)"
        )
    return threads


# ---------------------------------------------------------------------------------------------
# Sentences in


def check_not_empty(texts: Sequence[str], names: Sequence[str], what: str = "a sentence") -> None:
    """A one-line error for the first empty or whitespace-only text, by its name."""
    for text, name in zip(texts, names):
        if not text.strip():
            raise ValueError(f"{name} is empty: expected {what}")


def read_texts(
    texts: Sequence[str], command: str, what: str = "a sentence", stdin: Any = None
) -> tuple[list[str], list[str]]:
    """The sentences and their names for messages ("TEXT 2", "stdin line 3"): the arguments,
    or stdin's lines when there are none or one is '-'. Empty sentences are one-line errors."""
    if not texts or list(texts) == ["-"]:
        stream = stdin if stdin is not None else sys.stdin
        if stream is None or (hasattr(stream, "isatty") and stream.isatty()):
            raise ValueError(
                f"no TEXT given and stdin is a terminal: pass sentences as arguments or pipe "
                f'them in, e.g. tfam {command} DIR "a sentence" or tfam {command} DIR < file.txt'
            )
        lines = _stdin_lines(stream)
        if not lines:
            raise ValueError("stdin is empty: expected one sentence per line")
        names = [f"stdin line {i}" for i in range(1, len(lines) + 1)]
    elif "-" in texts:
        raise ValueError("'-' (read stdin) cannot be mixed with TEXT arguments")
    else:
        lines = list(texts)
        names = [f"TEXT {i}" if len(texts) > 1 else "TEXT" for i in range(1, len(texts) + 1)]
    for line, name in zip(lines, names):
        check_utf8(line, name)
    check_not_empty(lines, names, what)
    return lines, names


UTF8_HINT = "save it as UTF-8 (e.g. iconv -f latin1 -t utf-8 FILE)"


def _stdin_lines(stream: Any) -> list[str]:
    """stdin's lines, decoded as UTF-8 here (a leading byte-order mark dropped): the text
    layer's decoding depends on the locale, and under C.UTF-8 it lets a bad byte through as a
    lone surrogate, which the tokenizer then refuses with a TypeError."""
    raw = getattr(stream, "buffer", None)
    if raw is None:  # a text stream (a test's StringIO): its text is checked by check_utf8
        return stream.read().splitlines()
    lines = raw.read().splitlines()
    if lines and lines[0].startswith(b"\xef\xbb\xbf"):
        lines[0] = lines[0][3:]
    out = []
    for i, line in enumerate(lines, 1):
        try:
            out.append(line.decode("utf-8"))
        except UnicodeDecodeError as err:
            raise ValueError(
                f"stdin line {i} is not UTF-8 text: byte 0x{line[err.start]:02x} at byte "
                f"{err.start + 1} of the line; {UTF8_HINT}"
            ) from None
    return out


def check_utf8(text: str, name: str) -> None:
    """A one-line error when ``text`` holds a byte that was not UTF-8 (Python keeps such bytes
    of the command line or a stream as lone surrogates, U+DC80..U+DCFF)."""
    for i, ch in enumerate(text):
        if "\udc80" <= ch <= "\udcff":
            raise ValueError(
                f"{name} is not UTF-8 text: byte 0x{ord(ch) - 0xDC00:02x} at character {i + 1}; "
                + (UTF8_HINT if name.startswith("stdin") else "give it in UTF-8")
            )


# ---------------------------------------------------------------------------------------------
# Images in

INVERT_CHOICES = {"auto": "auto", "yes": True, "no": False}


def add_image_options(p: argparse.ArgumentParser) -> None:
    """--invert and --no-stretch, of `tfam predict` and `tfam viz attention`."""
    p.add_argument(
        "--invert",
        choices=tuple(INVERT_CHOICES),
        default="auto",
        help="invert intensities: auto (digits-like data, bright border), yes or no (default: auto)",
    )
    p.add_argument(
        "--no-stretch",
        action="store_true",
        help="do not stretch the contrast of digits-like images to the full range",
    )


def image_options(args: argparse.Namespace) -> dict:
    return {"invert": INVERT_CHOICES[args.invert], "stretch": False if args.no_stretch else None}


def layer_index(layer: int, depth: int) -> int:
    """--layer counts blocks from 1 (negative from the end) -> 0-based index; out of range is
    one line naming the value and the valid ones."""
    if layer == 0 or not -depth <= layer <= depth:
        raise ValueError(
            f"--layer {layer} is invalid: the model has {depth} blocks; expected 1..{depth} "
            f"or -{depth}..-1 (from the end)"
        )
    return layer - 1 if layer > 0 else layer


def eval_split(args: argparse.Namespace, entry: Any) -> str:
    """`tfam eval`'s --split, checked against the dataset's splits (default: its test split,
    else its validation split); also checks --limit (an int >= 1 when given)."""
    limit = getattr(args, "limit", None)
    if limit is not None and limit < 1:
        raise ValueError(f"--limit {limit} is invalid: expected an int >= 1")
    split = args.split or entry.test_split or entry.val_split
    if split not in entry.splits:
        raise ValueError(
            f"--split {split!r} is invalid for {entry.name}: expected one of "
            f"{', '.join(entry.splits)}"
        )
    return split


def note(text: str) -> None:
    """A remark on stderr that is not an error (stdout stays the command's result)."""
    print(f"tfam: note: {text}", file=sys.stderr)


def note_chance(accuracy: float, counts: Any, split: str) -> None:
    """A ``tfam: note:`` when a classifier's accuracy on ``split`` is at chance (examples per
    class ``counts``: the majority class and 1 / classes are chance)."""
    from tfam.training.sanity import chance_problem

    problem = chance_problem(accuracy, counts=counts or None, split=f"{split} split")
    if problem is not None:
        note(problem)
