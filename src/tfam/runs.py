"""Run directories: what a model directory holds and how to open it, for every command.

A run directory (written by `tfam train`, ``model.save_pretrained`` or `tfam convert`) holds
``config.json`` and ``model.safetensors``, and by what it was trained on: ``preprocess.json``
(images), ``tokenizer.json`` (text: tfam's tokenizer, or Hugging Face's in a converted
directory), ``labels.json`` ``{"task", "data", "classes"}`` (text datasets with classes) and
``train_args.json`` (the `tfam train` command). This module reads them: the config without
weights (:func:`read_config`), the family's class (:func:`family_class`), the model on a device
(:func:`resolve_model` + :meth:`ModelSource.load`), the tokenizer (:func:`load_run_tokenizer`),
the class names (:func:`load_labels`, :func:`run_classes`), what the run was trained for
(:func:`run_task`), a one-line description for messages (:func:`describe_run`), and the loaded
runs of the text commands (:func:`load_seq2seq`, :func:`load_lm`, :func:`load_encoder`).

It asks a family's class what it takes and can do (``inputs``, ``generates``, ``embeds``,
``head_task``) and never compares family names. Errors are one line, naming the file and what
writes it. Only the standard library is imported at module level: the command line imports
this module when it starts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONFIG_FILE = "config.json"  # = tfam.models.base.CONFIG_NAME
# = tfam.data.text.tokenizer.TOKENIZER_FILE (not imported: startup)
TOKENIZER_FILE = "tokenizer.json"
LABELS_FILE = "labels.json"
TRAIN_ARGS_FILE = "train_args.json"
PREPROCESS_FILE = "preprocess.json"

# The tasks whose outputs are classes (a run of one keeps their names beside the model).
CLASSIFICATION_TASKS = ("image-classification", "sequence-classification", "token-classification")

__all__ = [
    "CLASSIFICATION_TASKS",
    "HFTokenizerFile",
    "LMRun",
    "ModelSource",
    "RunTask",
    "Seq2SeqRun",
    "TextRun",
    "describe_run",
    "family_class",
    "is_seq2seq",
    "load_encoder",
    "load_labels",
    "load_lm",
    "load_run_tokenizer",
    "load_seq2seq",
    "load_tokenizer",
    "read_config",
    "read_json_object",
    "resolve_model",
    "run_classes",
    "run_is_seq2seq",
    "run_task",
    "save_tokenizer",
    "tokenizer_bytes",
    "train_args",
    "write_labels",
]


# ---------------------------------------------------------------------------------------------
# Files


def read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; one-line errors for invalid JSON and for another type."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(data).__name__}")
    return data


def train_args(run_dir: Path) -> dict[str, Any]:
    """train_args.json of a run, or {} when there is none or it is unreadable."""
    try:
        return read_json_object(run_dir / TRAIN_ARGS_FILE)
    except (OSError, ValueError):
        return {}


def read_config(run_dir: Path) -> Any:
    """The tfam config of a model directory (no weights loaded)."""
    import tfam.models  # noqa: F401 - registers every family's config class
    from tfam.config import BaseConfig

    data = read_json_object(run_dir / CONFIG_FILE)
    family = data.get("family")
    if not family:
        if "model_type" in data:
            raise ValueError(
                f"{run_dir} is a Hugging Face directory (model_type={data['model_type']!r}); "
                f"convert it first: tfam convert hf-to-tfam {run_dir} OUT_DIR"
            )
        raise ValueError(f"{run_dir / CONFIG_FILE} names no model family")
    try:
        return BaseConfig.from_dict(data)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{run_dir / CONFIG_FILE}: {err}") from None


def family_class(family: str) -> Any:
    """The model class of a family name (None when no family of that name is registered):
    what the family takes and can do (``inputs``, ``tasks``, ``generates``, ``embeds``)."""
    from tfam.models import MODEL_CLASSES

    return MODEL_CLASSES.get(family)


# ---------------------------------------------------------------------------------------------
# Models: a preset, a family or a model directory


@dataclass(frozen=True)
class ModelSource:
    """What a NAME on the command line refers to: ``kind`` is "preset", "family" or "dir";
    ``family`` is the model family; ``path`` the model directory (kind "dir")."""

    kind: str
    name: str
    family: str
    path: Path | None = None

    @property
    def model_class(self) -> Any:
        """The family's model class (None for a directory of an unknown family)."""
        return family_class(self.family)

    def load(self, device: Any = "cpu", **overrides: Any) -> Any:
        """The model: trained weights for a directory, a fresh init for a preset or family."""
        from tfam.models import create_model, from_pretrained

        if self.path is not None:
            model = from_pretrained(self.path, **overrides)
        else:
            model = create_model(self.name, **overrides)
        return model.to(device)


def resolve_model(
    spec: str | os.PathLike,
    *,
    what: str = "NAME",
    kinds: Sequence[str] = ("preset", "family", "dir"),
) -> ModelSource:
    """The one resolver of "preset name, family or model directory" for every subcommand.

    ``what`` names the argument in errors; ``kinds`` says which of the three it accepts. A model
    directory holds config.json (and model.safetensors, checked when it is loaded).
    """
    from tfam.models import MODEL_CLASSES, PRESETS

    name = str(spec)
    if "preset" in kinds and name in PRESETS:
        return ModelSource("preset", name, PRESETS[name].family)
    if "family" in kinds and name in MODEL_CLASSES:
        return ModelSource("family", name, name)
    path = Path(name).expanduser()
    if "dir" in kinds and path.is_dir():
        config = path / CONFIG_FILE
        if not config.is_file():
            raise FileNotFoundError(
                f"{what}={name!r} is a directory without {CONFIG_FILE}: a model directory holds "
                f"{CONFIG_FILE} and model.safetensors (written by save_pretrained or `tfam train`)"
            )
        data = read_json_object(config)
        return ModelSource("dir", name, str(data.get("family", "")), path)
    if list(kinds) == ["dir"]:
        raise FileNotFoundError(f"run directory {name!r} not found")
    valid = []
    if "preset" in kinds:
        valid.append(f"presets: {', '.join(sorted(PRESETS))}")
    if "family" in kinds:
        valid.append(f"families: {', '.join(sorted(MODEL_CLASSES))}")
    alternatives = {"preset": "a preset", "family": "a family", "dir": "a model directory"}
    said = " or ".join(alternatives[k] for k in kinds)
    if what.startswith("--"):
        raise ValueError(f"{what} {name!r} is invalid: expected {said}; {'; '.join(valid)}")
    raise ValueError(f"{what}={name!r} is not {said}; {'; '.join(valid)}")


def is_seq2seq(model_class: Any) -> bool:
    """Whether a model class is an encoder–decoder that generates from a source."""
    return getattr(model_class, "inputs", "") == "token-pairs" and bool(
        getattr(model_class, "generates", False)
    )


def run_is_seq2seq(source: ModelSource) -> bool:
    """Whether the model directory of ``source`` holds an encoder–decoder, judged from its
    family's class without loading weights."""
    return is_seq2seq(source.model_class)


# ---------------------------------------------------------------------------------------------
# What a run was trained for


def describe_run(run_dir: Path, family: str) -> str:
    """'a vit image-classification run (vit_digits on digits)': what a run directory holds,
    from its train_args.json and the dataset catalog, for error messages."""
    args = train_args(run_dir)
    task = str(args.get("task") or "")  # recorded when not the data's default (--task)
    data = args.get("data")
    if data and not task:
        try:
            from tfam.data import resolve_data

            task = resolve_data(data, run=run_dir).task
        except (ValueError, OSError):
            task = ""
    what = " ".join(x for x in (family or "model", task, "run") if x)
    article = "an" if what[:1].lower() in "aeiou" else "a"
    title = args.get("title")
    return f"{article} {what}" + (f" ({title})" if title else "")


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
    """The task and dataset of a run: labels.json, else train_args.json's task (recorded when
    --task chose another than the data's default), else its dataset's in the catalog, else what the model's head computes (the family's ``head_task``)."""
    labels: dict[str, Any] = {}
    if (run_dir / LABELS_FILE).is_file():
        try:
            labels = read_json_object(run_dir / LABELS_FILE)
        except ValueError:
            labels = {}
    data = str(labels.get("data") or train_args(run_dir).get("data") or "")
    task = str(labels.get("task") or train_args(run_dir).get("task") or "")
    if not task and data:
        from tfam.data import resolve_data

        try:
            task = resolve_data(data, run=run_dir).task
        except (ValueError, OSError):
            task = ""
    if not task:
        cls = family_class(getattr(config, "family", ""))
        task = cls.head_task(config) if cls is not None else ""
    return RunTask(task, data)


def load_labels(run_dir: Path, needed_for: str) -> dict[str, Any]:
    """``labels.json`` of a run: {"task", "data", "classes"} (classes a list of strings)."""
    path = run_dir / LABELS_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{run_dir} has no {LABELS_FILE}, which {needed_for} needs for the class names: "
            "`tfam train` writes it for a dataset with classes (or write "
            '{"task": ..., "data": ..., "classes": [...]} there yourself)'
        )
    data = read_json_object(path)
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


def run_classes(run_dir: Path, config: Any) -> list[str] | None:
    """The class names of a classifier's outputs, from preprocess.json (image runs) or
    labels.json (text runs), when they are as many as the model's classes; else None."""
    cls = family_class(getattr(config, "family", ""))
    task = cls.head_task(config) if cls is not None else ""
    if task not in CLASSIFICATION_TASKS:
        return None
    name = PREPROCESS_FILE if cls.inputs == "image" else LABELS_FILE
    count = getattr(config, "num_classes", getattr(config, "num_labels", None))
    path = run_dir / name
    if not path.is_file():
        return None
    classes = read_json_object(path).get("classes")
    if classes and len(classes) == count:
        return [str(c) for c in classes]
    return None


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


def load_tokenizer(run_dir: Path) -> Any:
    """The tfam tokenizer saved beside a run's model; a one-line error when there is none."""
    path = run_dir / TOKENIZER_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{run_dir} has no {TOKENIZER_FILE}: `tfam train` writes it beside the model when it "
            "trains on a text dataset (for a model saved from Python, save its tokenizer into "
            "the same directory with tokenizer.save(DIR))"
        )
    from tfam.data.text.tokenizer import load_tokenizer as load

    try:
        return load(run_dir)
    except (KeyError, TypeError) as err:  # readable JSON of the wrong shape
        raise ValueError(f"{path} is not a valid tokenizer file: {err!r}") from None


def tokenizer_bytes(tokenizer: Any) -> bytes:
    """The tokenizer file as its own ``save`` writes it."""
    import tempfile

    if callable(getattr(tokenizer, "to_json", None)):
        return tokenizer.to_json().encode("utf-8")
    with tempfile.TemporaryDirectory(prefix="tfam-tokenizer-") as tmp:
        tokenizer.save(tmp)
        return (Path(tmp) / TOKENIZER_FILE).read_bytes()


def save_tokenizer(out: Path, tokenizer: Any) -> Path:
    """Write the dataset's tokenizer to OUT/tokenizer.json before training starts, atomically,
    so translate, eval and viz find it beside every checkpoint and the final model.

    A run directory that already holds another tokenizer together with a checkpoint or a model
    keeps it: that run's ids mean that tokenizer's pieces, so this is an error."""
    from tfam.fileio import atomic_write_bytes

    path = out / TOKENIZER_FILE
    data = tokenizer_bytes(tokenizer)
    if path.is_file():
        if path.read_bytes() == data:
            return path
        if (out / "checkpoints").is_dir() or (out / "model.safetensors").exists():
            raise ValueError(
                f"{path} holds another tokenizer than this dataset's, and {out} holds a trained "
                "run whose ids follow it; choose another --out"
            )
    return atomic_write_bytes(path, data)


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

    from tfam.data.text.tokenizer import load_tokenizer as load

    try:  # registers the WordPiece kind with the loader (importing tfam.data does too)
        importlib.import_module("tfam.data.text.wordpiece")
    except ImportError:
        pass

    try:
        return load(run_dir)
    except (KeyError, TypeError, ValueError) as err:
        tfam_error = err
    try:
        return HFTokenizerFile(path)
    except Exception:  # noqa: BLE001 - any failure of the second reader: report the first
        raise ValueError(f"{path} is not a valid tokenizer file: {tfam_error}") from None


def _check_vocab(run_dir: Path, tokenizer: Any, config: Any) -> None:
    if tokenizer.vocab_size > config.vocab_size:
        raise ValueError(
            f"{run_dir / TOKENIZER_FILE} has {tokenizer.vocab_size} tokens but the model "
            f"only vocab_size={config.vocab_size}: the tokenizer is not the model's"
        )


# ---------------------------------------------------------------------------------------------
# Loaded runs of the text commands


@dataclass
class TextRun:
    """A loaded text run: its directory, model (eval mode, on ``device``) and tokenizer (None
    for a language model without tokenizer.json)."""

    run_dir: Path
    model: Any
    tokenizer: Any
    device: Any

    @property
    def max_positions(self) -> int:
        """The model's positions: a decoder-only model's context, a seq2seq model's longest
        source or target."""
        return int(self.model.config.max_positions)

    context = max_positions


# The runs the seq2seq and the language-model commands load (one shape).
Seq2SeqRun = LMRun = TextRun


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
    _check_vocab(run_dir, tokenizer, c)
    for name in ("pad", "bos", "eos"):
        ours, theirs = getattr(tokenizer, f"{name}_id"), getattr(c, f"{name}_token_id")
        if ours != theirs:
            raise ValueError(
                f"{run_dir / TOKENIZER_FILE} has {name}_id={ours} but the model "
                f"{name}_token_id={theirs}: the tokenizer is not the model's"
            )
    return Seq2SeqRun(run_dir, model, tokenizer, device)


def load_lm(dir_arg: str, device: Any, need_tokenizer: bool) -> LMRun:
    """The model and tokenizer of a decoder-only language-model run (a family that reads
    tokens and generates), with one-line errors: not a model directory, not a decoder-only
    model (says what the run is), no tokenizer.json."""
    source = resolve_model(dir_arg, what="DIR", kinds=("dir",))
    run_dir = Path(dir_arg)
    config = read_config(run_dir)
    cls = family_class(config.family)
    if cls is None or not (cls.inputs == "tokens" and cls.generates):
        raise ValueError(
            f"generate needs a decoder-only language model (a GPT run, e.g. `tfam train gpt "
            f"--data kjv`), but {run_dir} holds {describe_run(run_dir, source.family)}"
        )
    tokenizer = None
    if need_tokenizer or (run_dir / TOKENIZER_FILE).is_file():
        tokenizer = load_run_tokenizer(
            run_dir,
            "--prompt (text to token ids)"
            if need_tokenizer
            else "decoding the generated ids to text",
        )
    model = source.load(device)
    model.eval()
    if tokenizer is not None:
        _check_vocab(run_dir, tokenizer, model.config)
    return LMRun(run_dir, model, tokenizer, device)


def _minilm_tokenizer() -> Any:
    from tfam.interop import minilm

    return minilm.load_tokenizer()


# Tokenizers of presets with pretrained weights (the pretrained registry gives the model only).
PRETRAINED_TOKENIZERS: dict[str, Callable[[], Any]] = {"minilm_l6": _minilm_tokenizer}


def load_encoder(spec: str) -> tuple[Any, Any, str]:
    """(sentence encoder in eval mode, tokenizer, what it is for messages) of a preset with
    pretrained weights, a run directory of a family that ``embeds``, or a Hugging Face
    directory that interop reads without transformers; one-line errors otherwise."""
    from tfam.models import PRESETS, from_pretrained
    from tfam.models.registry import has_pretrained, load_pretrained

    if spec in PRESETS and not Path(spec).is_dir():
        if not has_pretrained(spec) or spec not in PRETRAINED_TOKENIZERS:
            with_weights = sorted(n for n in PRESETS if has_pretrained(n))
            raise ValueError(
                f"DIR_OR_PRESET={spec!r} is a preset without pretrained weights: its random "
                "initial weights give meaningless embeddings; presets with weights: "
                f"{', '.join(with_weights) or 'none installed'}; or pass a trained BERT run "
                "directory"
            )
        return load_pretrained(spec).eval(), PRETRAINED_TOKENIZERS[spec](), spec
    path = Path(spec).expanduser()
    if not path.is_dir():
        raise ValueError(
            f"DIR_OR_PRESET={spec!r} is neither a preset with pretrained weights nor a directory "
            "(a BERT run directory, or a Hugging Face BERT directory)"
        )
    if not (path / CONFIG_FILE).is_file():
        raise FileNotFoundError(
            f"DIR_OR_PRESET={spec!r} is a directory without config.json: a model directory "
            "holds config.json and model.safetensors"
        )
    raw = json.loads((path / CONFIG_FILE).read_text())
    if isinstance(raw, dict) and "model_type" in raw:
        from tfam.interop.registry import CONVERTERS

        converter = CONVERTERS.get(raw["model_type"])
        if converter is not None and converter.read_dir and converter.family.embeds:
            # A Hugging Face directory that interop reads without transformers (BERT's).
            from tfam.data.text.wordpiece import WordPieceTokenizer

            return converter.read_dir(path).eval(), WordPieceTokenizer(path), str(path)
    config = read_config(path)
    if not getattr(family_class(config.family), "embeds", False):
        raise ValueError(
            f"embed needs a BERT (a bidirectional encoder), but {path} holds "
            f"{describe_run(path, config.family)}"
        )
    tokenizer = load_run_tokenizer(path, "embed (sentences to token ids)")
    return from_pretrained(path).eval(), tokenizer, str(path)
