"""What the text subcommands share (generate, embed, predict and eval on BERT and GPT runs):
the tokenizer and labels.json of a run directory, what a run was trained
for, and one-line errors for text a tokenizer cannot encode.

A run directory of a text task (written by `tfam train`) holds config.json, model.safetensors,
tokenizer.json (the dataset's tokenizer) and, when the dataset has classes, labels.json
``{"task": ..., "data": ..., "classes": [...]}``. A model directory converted from Hugging
Face (`tfam convert hf-to-tfam`) may hold Hugging Face's own tokenizer.json instead, which is
read through the ``tokenizers`` library (:class:`HFTokenizerFile`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfam.cli.translate import TOKENIZER_FILE

LABELS_FILE = "labels.json"
TRAIN_ARGS_FILE = "train_args.json"

# What a family's head computes, when a run directory says nothing else (no labels.json, no
# train_args.json: a model saved from Python or converted from Hugging Face).
_HEAD_TASKS = {
    "sequence": "sequence-classification",
    "token": "token-classification",
    "mlm": "masked-lm",
}


def note(text: str) -> None:
    """A remark on stderr that is not an error (stdout stays the command's result)."""
    print(f"tfam: note: {text}", file=sys.stderr)


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
# Tokenizers


class HFTokenizerFile:
    """A Hugging Face ``tokenizer.json`` (the ``tokenizers`` library) behind the calls the
    commands make of a tfam tokenizer: ``encode`` (no special tokens), ``decode`` (specials
    skipped), ``vocab_size``, ``unk_id`` (None when the model has no unknown token: GPT-2's
    byte-level BPE encodes every text)."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        self.path = path
        self.tokenizer = Tokenizer.from_file(str(path))
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        model = json.loads(path.read_text(encoding="utf-8")).get("model") or {}
        unk = model.get("unk_token")
        self.unk_id = self.tokenizer.token_to_id(unk) if isinstance(unk, str) else None
        self.pad_id = self.tokenizer.token_to_id("[PAD]")

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Iterable[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def __repr__(self) -> str:
        return f"HFTokenizerFile({str(self.path)!r}, vocab_size={self.vocab_size})"


def load_run_tokenizer(run_dir: Path, needed_for: str) -> Any:
    """The tokenizer saved beside a run's model: tfam's (char, BPE, WordPiece), else a Hugging
    Face tokenizer.json. A one-line error naming the missing file and ``needed_for``."""
    path = run_dir / TOKENIZER_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{run_dir} has no {TOKENIZER_FILE}, which {needed_for} needs: `tfam train` writes "
            "it beside the model when it trains on a text dataset, and `tfam convert "
            "hf-to-tfam` copies a Hugging Face directory's tokenizer.json (for a model saved "
            "from Python, save its tokenizer into the same directory with tokenizer.save(DIR))"
        )
    import importlib

    from tfam.data.tokenizer import load_tokenizer

    try:  # registers the WordPiece kind with the loader (importing tfam.data does too)
        importlib.import_module("tfam.data.wordpiece")
    except ImportError:
        pass

    try:
        return load_tokenizer(run_dir)
    except (KeyError, TypeError, ValueError) as err:
        tfam_error = err
    try:
        return HFTokenizerFile(path)
    except Exception:  # noqa: BLE001 - any failure of the second reader: report the first
        raise ValueError(f"{path} is not a valid tokenizer file: {tfam_error}") from None


# ---------------------------------------------------------------------------------------------
# What a run was trained for


def _read_json_object(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(data).__name__}")
    return data


def load_labels(run_dir: Path, needed_for: str) -> dict[str, Any]:
    """``labels.json`` of a run: {"task", "data", "classes"} (classes a list of strings)."""
    path = run_dir / LABELS_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{run_dir} has no {LABELS_FILE}, which {needed_for} needs for the class names: "
            "`tfam train` writes it for a dataset with classes (or write "
            '{"task": ..., "data": ..., "classes": [...]} there yourself)'
        )
    data = _read_json_object(path)
    classes = data.get("classes")
    if not isinstance(classes, list) or not classes or not all(isinstance(c, str) for c in classes):
        raise ValueError(f"{path}: 'classes' must be a non-empty list of class names")
    return data


def write_labels(out: Path, task: str, data: str, classes: Sequence[str]) -> Path:
    """OUT/labels.json, atomically."""
    from tfam.fileio import atomic_write_bytes

    record = {"task": task, "data": data, "classes": [str(c) for c in classes]}
    text = json.dumps(record, indent=1, ensure_ascii=False) + "\n"
    return atomic_write_bytes(out / LABELS_FILE, text.encode("utf-8"))


def train_args(run_dir: Path) -> dict[str, Any]:
    """train_args.json of a run, or {} when there is none or it is unreadable."""
    try:
        return _read_json_object(run_dir / TRAIN_ARGS_FILE)
    except (OSError, ValueError):
        return {}


@dataclass(frozen=True)
class RunTask:
    """What a run was trained for: ``task`` (a TASKS name, "" when unknown), ``data`` (the
    dataset name, "" when unknown) and how it is said in messages."""

    task: str
    data: str

    def __str__(self) -> str:
        if self.task and self.data:
            return f"{self.task} on {self.data}"
        return self.task or (f"the dataset {self.data}" if self.data else "an unknown task")


def run_task(run_dir: Path, config: Any) -> RunTask:
    """The task and dataset of a run: labels.json, else train_args.json's dataset in the
    catalog, else what the model's head computes (GPT: causal-lm)."""
    labels: dict[str, Any] = {}
    if (run_dir / LABELS_FILE).is_file():
        try:
            labels = _read_json_object(run_dir / LABELS_FILE)
        except ValueError:
            labels = {}
    data = str(labels.get("data") or train_args(run_dir).get("data") or "")
    task = str(labels.get("task") or "")
    if not task and data:
        from tfam.data import resolve_data

        try:
            task = resolve_data(data).task
        except (ValueError, OSError):
            task = ""
    if not task:
        family = getattr(config, "family", "")
        if family == "gpt":
            task = "causal-lm"
        elif family == "bert":
            task = _HEAD_TASKS.get(getattr(config, "head", ""), "")
    return RunTask(task, data)


def read_config(run_dir: Path) -> Any:
    """The tfam config of a model directory (no weights loaded)."""
    import tfam  # noqa: F401 - registers every family's config class
    from tfam.config import BaseConfig

    data = _read_json_object(run_dir / "config.json")
    family = data.get("family")
    if not family:
        if "model_type" in data:
            raise ValueError(
                f"{run_dir} is a Hugging Face directory (model_type={data['model_type']!r}); "
                f"convert it first: tfam convert hf-to-tfam {run_dir} OUT_DIR"
            )
        raise ValueError(f"{run_dir / 'config.json'} names no model family")
    try:
        return BaseConfig.from_dict(data)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{run_dir / 'config.json'}: {err}") from None
