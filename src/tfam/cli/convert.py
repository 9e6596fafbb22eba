"""`tfam convert`: a local Hugging Face directory (every model type a converter registers:
ViT, DeiT, Swin, ResNet, BERT, GPT-2, ImageGPT, MarianMT) <-> a tfam model directory.

Both directions read and write local directories only (nothing is downloaded), then reload
what they wrote and compare it with the source model on a random batch, so a conversion that
reports success has been checked end to end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch

from tfam.cli.common import add_command

EPILOG = """examples:
  tfam convert tfam-to-hf runs/digits hf/digits     a trained tfam ViT -> HF ViTForImageClassification
  tfam convert hf-to-tfam hf/digits runs/from-hf    a local HF ViT dir (save_pretrained) -> tfam
  tfam convert tfam-to-hf runs/sentiment hf/sentiment    a BERT run -> BertForSequenceClassification
  tfam convert hf-to-tfam hf/bert-tagger runs/tagger     BertForTokenClassification -> tfam BERT
  tfam convert hf-to-tfam hf/gpt2 runs/gpt2              GPT2LMHeadModel -> tfam GPT (then generate)
  tfam convert hf-to-tfam hf/opus-mt runs/marian         MarianMTModel -> tfam Transformer
  tfam convert tfam-to-hf runs/marian hf/marian          a post-norm tfam Transformer -> MarianMTModel
  python -c "from transformers import ViTForImageClassification as M; M.from_pretrained('hf/digits')"

hf-to-tfam reads HF_DIR/config.json and its weights: model_type 'vit' (ViTModel,
ViTForImageClassification; a ViTModel pooler becomes tfam's pre-logits layer), 'bert'
(BertModel, BertForMaskedLM, BertForTokenClassification, BertForSequenceClassification: tfam's
BERT with head none, mlm, token or sequence), 'gpt2' (GPT2LMHeadModel, GPT2Model) or 'marian'
(MarianMTModel: tfam's encoder–decoder Transformer). tfam-to-hf writes the counterpart of a tfam
ViT, BERT (by its config.head), GPT or Marian-shaped Transformer. Class names travel
both ways: preprocess.json (images) and labels.json (text runs) <-> the HF config's id2label.
A tokenizer.json is copied along (a tfam character tokenizer, which HF cannot read, stays
behind), so `tfam generate`, `predict` and `embed` work on a converted directory.
"""


def _converters() -> dict[str, Any]:
    """The registered converters by Hugging Face model_type (tfam.interop.registry)."""
    from tfam.interop.registry import CONVERTERS

    return CONVERTERS


def register(subparsers: Any) -> None:
    parser = add_command(
        subparsers,
        "convert",
        help="convert a model between Hugging Face and tfam directories (every family with a "
        "Hugging Face counterpart)",
        description="Convert a model between a local Hugging Face directory (save_pretrained) "
        "and a tfam model directory, then check the written model against the source. "
        "Hugging Face model types: " + ", ".join(sorted(_converters())) + ".",
        epilog=EPILOG,
    )
    parser.add_argument(
        "direction",
        choices=["hf-to-tfam", "tfam-to-hf"],
        help="hf-to-tfam: SRC is a Hugging Face dir; tfam-to-hf: SRC is a tfam model or run dir",
    )
    parser.add_argument("src", metavar="SRC", help="directory to read")
    parser.add_argument("out", metavar="OUT_DIR", help="directory to write (created if missing)")
    parser.add_argument(
        "--no-fused-qkv",
        dest="fused_qkv",
        action="store_false",
        help="hf-to-tfam: keep W_Q, W_K, W_V as three Linear layers (default: one fused qkv)",
    )
    parser.add_argument(
        "--attention",
        default="sdpa",
        help="hf-to-tfam: tfam attention kernel of the written model (default: sdpa)",
    )
    parser.add_argument(
        "--atol",
        type=float,
        default=1e-4,
        help="largest max |difference| of outputs accepted by the check (default: 1e-4)",
    )
    parser.add_argument(
        "--no-check",
        dest="check",
        action="store_false",
        help="skip the output comparison (the written directory is still reloaded)",
    )
    parser.set_defaults(func=run)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from err


def _transformers() -> Any:
    """transformers (or an ImportError with the install hint), without progress bars: a
    conversion prints its own two lines."""
    from tfam.interop.common import require_transformers

    transformers = require_transformers()
    transformers.utils.logging.disable_progress_bar()
    return transformers


def _check_dirs(src: Path, out: Path) -> Path:
    config = src / "config.json"
    if not config.is_file():
        raise FileNotFoundError(f"{config} not found: SRC must be a model directory")
    if out.resolve() == src.resolve():
        raise ValueError(f"OUT_DIR={str(out)!r} is invalid: it must differ from SRC")
    return config


def _load_hf(src: Path) -> Any:
    """The HF model saved in src (tfam.interop.registry.load_hf_directory)."""
    from tfam.interop.registry import load_hf_directory

    hf_config = _read_json(src / "config.json")
    if "family" in hf_config and "model_type" not in hf_config:
        raise ValueError(
            f"SRC={str(src)!r} is a tfam model directory; use `tfam convert tfam-to-hf`"
        )
    return load_hf_directory(src, quiet=True)


def _check_bin_weights(src: Path) -> None:
    """A ``pytorch_model*.bin`` that transformers would read (no safetensors beside it) must be
    plain weights, a dict of tensors: torch.load refuses anything else (a pickled model
    object, an archive torch did not write) with a many-line traceback, so it is read here
    first (weights only, memory-mapped: no copy of the tensors) and refused in one line."""
    import pickle
    import zipfile

    if any(src.glob("*.safetensors")):
        return  # transformers reads those first
    for path in sorted(src.glob("pytorch_model*.bin")):
        reason = None
        try:
            obj = torch.load(
                path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path)
            )
        except pickle.UnpicklingError as err:
            text = str(err)
            found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text)
            if found:
                reason = f"it is a pickled Python object ({found.group(1)})"
            else:
                said = re.search(r"WeightsUnpickler error:\s*(.+)", text)
                detail = said.group(1).strip() if said else _last_reason(text)
                reason = f"it is not a file torch.save wrote ({detail})"
        except (RuntimeError, EOFError, ValueError, OSError) as err:
            reason = f"torch.load cannot read it ({_last_reason(str(err))})"
        else:
            plain = isinstance(obj, dict) and all(
                isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items()
            )
            if not plain:
                reason = f"it holds a {type(obj).__name__}"
        if reason is not None:
            raise ValueError(
                f"{path} is not plain weights: {reason}, not a dict of tensors; save the "
                "model with save_pretrained (model.safetensors) or torch.save(model."
                "state_dict(), ...)"
            )


def _last_reason(text: str) -> str:
    """The informative line of a torch.load error: the first non-empty one without its
    "[enforce fail at file.cc:N] ." prefix."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    line = lines[0] if lines else "unknown error"
    return re.sub(r"^\[enforce fail at [^\]]*\]\s*\.?\s*", "", line)


def _copy_extras(src: Path, out: Path, direction: str) -> list[str]:
    """Copy preprocess.json, tokenizer.json and labels.json along (what the commands read
    beside a model), both ways (class names travel in the HF config's id2label too); -> the
    names copied. A tfam character tokenizer does not go to HF (no HF tokenizer can read it)."""
    copied = []
    for name in ("preprocess.json", "tokenizer.json", "labels.json"):
        path = src / name
        if not path.is_file():
            continue
        if name == "tokenizer.json" and direction == "tfam-to-hf":
            try:
                if "tfam_tokenizer" in _read_json(path):
                    continue
            except ValueError:
                continue
        shutil.copyfile(path, out / name)
        copied.append(name)
    return copied


def _labels_from_hf(hf: Any, model: Any, out: Path, src: Path) -> bool:
    """OUT/labels.json from the HF config's id2label, for a text classifier; -> written."""
    from tfam.runs import CLASSIFICATION_TASKS, write_labels

    task = type(model).head_task(model.config)
    if type(model).inputs != "tokens" or task not in CLASSIFICATION_TASKS:
        return False
    if (out / "labels.json").is_file():
        return False
    id2label = getattr(hf.config, "id2label", None) or {}
    n = model.config.num_labels
    classes = [str(id2label.get(i, id2label.get(str(i), f"LABEL_{i}"))) for i in range(n)]
    write_labels(out, task, str(src), classes)
    return True


def _hf_to_tfam(args: argparse.Namespace, src: Path, out: Path) -> tuple[Any, Any]:
    """Convert and write; -> (tfam model as reloaded from out, the source HF model)."""
    from tfam.interop import from_hf
    from tfam.models import from_pretrained

    hf = _load_hf(src)
    from_hf(hf, fused_qkv=args.fused_qkv, attention=args.attention).save_pretrained(out)
    return from_pretrained(out), hf


def _tfam_to_hf(args: argparse.Namespace, src: Path, out: Path) -> tuple[Any, Any]:
    """Convert and write; -> (the source tfam model, HF model as reloaded from out)."""
    from tfam.interop import to_hf
    from tfam.models import from_pretrained

    config = _read_json(src / "config.json")
    if "model_type" in config:
        raise ValueError(
            f"SRC={str(src)!r} is a Hugging Face directory; use `tfam convert hf-to-tfam`"
        )
    from tfam.runs import run_classes

    model = from_pretrained(src)
    if not any(c.to_hf for c in type(model).converters):
        titles = [c.family.title for c in _converters().values() if c.to_hf]
        said = ", ".join(titles[:-1]) + f" and {titles[-1]}" if len(titles) > 1 else titles[0]
        raise ValueError(
            f"SRC={str(src)!r} holds a {model.config.family!r} model: tfam converts {said} to "
            "Hugging Face"
        )
    classes = run_classes(src, model.config)
    _transformers()
    options = {} if classes is None else {"id2label": dict(enumerate(classes))}
    to_hf(model, **options).save_pretrained(out)
    return model, _load_hf(out)


def _describe(model: Any) -> str:
    """The shape of a converted model, for the one line that reports the conversion."""
    c = model.config
    text = f"D={c.dim} depth={c.depth}" + (f" heads={c.heads}" if type(model).attends else "")
    if type(model).inputs == "image":
        text += f" image {c.image_size[0]}x{c.image_size[1]}"
        if hasattr(c, "patch_size"):
            text += f" patch {c.patch_size[0]}x{c.patch_size[1]}"
        text += f" in_channels={c.in_channels} num_classes={c.num_classes}"
        if getattr(c, "representation_size", None):
            text += f" representation_size={c.representation_size}"
        if getattr(c, "depths", None):  # a hierarchical model's blocks per stage
            text += f" depths={list(c.depths)}"
        return text
    if getattr(c, "decoder_depth", c.depth) != c.depth:
        text += f" decoder_depth={c.decoder_depth}"
    text += f" vocab_size={c.vocab_size} max_positions={c.max_positions}"
    if hasattr(c, "head"):
        from tfam.runs import CLASSIFICATION_TASKS

        text += f" head={c.head}"
        if type(model).head_task(c) in CLASSIFICATION_TASKS:
            text += f" num_labels={c.num_labels}"
        if c.pooler:
            text += " pooler"
    return text


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local directories only, never the hub
    src, out = Path(args.src), Path(args.out)
    _check_dirs(src, out)
    if args.direction == "hf-to-tfam":
        _check_bin_weights(src)  # before OUT_DIR is made: a refused source leaves nothing
    out.mkdir(parents=True, exist_ok=True)
    if args.direction == "hf-to-tfam":
        tfam_model, hf_model = _hf_to_tfam(args, src, out)
    else:
        tfam_model, hf_model = _tfam_to_hf(args, src, out)
    copied = _copy_extras(src, out, args.direction)
    if args.direction == "hf-to-tfam" and _labels_from_hf(hf_model, tfam_model, out, src):
        copied.append("labels.json (from id2label)")
    target = (
        f"tfam {type(tfam_model).title}"
        if args.direction == "hf-to-tfam"
        else type(hf_model).__name__
    )
    print(
        f"wrote {out} ({target}): {_describe(tfam_model)}"
        + "".join(f" + {name}" for name in copied)
    )
    if not args.check:
        return 0
    # The written directory was reloaded above: compare what is on disk with the source.
    converter = _converters()[hf_model.config.model_type]
    if converter.compare is None:
        print(f"check: none (the {converter.model_type!r} converter declares no comparison)")
        return 0
    tfam_model.eval()
    hf_model.eval()
    with torch.no_grad():
        diff = converter.compare(tfam_model, hf_model)
    ok = diff <= args.atol
    sample = converter.sample
    print(
        f"check: max |diff| between {out} and {src} on {sample} = {diff:.3g} "
        f"({'ok' if ok else 'FAILED'}, atol {args.atol:g})"
    )
    return 0 if ok else 1
