"""`tfam convert`: a local Hugging Face ViT, BERT, GPT-2 or MarianMT directory <-> a tfam model
directory.

Both directions read and write local directories only (nothing is downloaded), then reload
what they wrote and compare it with the source model on a random batch, so a conversion that
reports success has been checked end to end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

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

HF_CLASSES = {  # model_type -> the transformers classes tfam converts
    "vit": ("ViTForImageClassification", "ViTModel"),
    "bert": (
        "BertModel",
        "BertForMaskedLM",
        "BertForTokenClassification",
        "BertForSequenceClassification",
    ),
    "gpt2": ("GPT2LMHeadModel", "GPT2Model"),
    "marian": ("MarianMTModel",),
}
# Classes whose pooler may be absent from the file (saved with add_pooling_layer=False).
_POOLED = {"ViTModel": "pooler.dense", "BertModel": "pooler.dense"}
# A BERT head and the task name of its labels.json.
_HEAD_TASKS = {"sequence": "sequence-classification", "token": "token-classification"}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "convert",
        help="convert a ViT, BERT, GPT or MarianMT between Hugging Face and tfam directories",
        description="Convert a ViT, BERT, GPT-2 or MarianMT between a local Hugging Face directory "
        "(save_pretrained) and a tfam model directory, then check the written model against "
        "the source.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    from tfam.interop.hf_vit import require_transformers

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


def _random_images(in_channels: int, image_size: tuple[int, int]) -> torch.Tensor:
    """Two reproducible random images (B=2, C, H, W) for the output check."""
    g = torch.Generator().manual_seed(0)
    return torch.randn(2, in_channels, *image_size, generator=g)


def _random_ids(vocab_size: int, length: int) -> torch.Tensor:
    """Two reproducible rows of random token ids (B=2, L) for the output check."""
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, vocab_size, (2, length), generator=g)


def _compare(tfam_model: Any, hf_model: Any) -> float:
    """Max |difference| of the two models' outputs on a random batch (see the family's
    comparison)."""
    tfam_model.eval()
    hf_model.eval()
    family = tfam_model.config.family
    with torch.no_grad():
        if family == "bert":
            return _compare_bert(tfam_model, hf_model)
        if family == "gpt":
            return _compare_gpt(tfam_model, hf_model)
        if family == "transformer":
            return _compare_marian(tfam_model, hf_model)
        return _compare_vit(tfam_model, hf_model)


def _compare_vit(tfam_model: Any, hf_model: Any) -> float:
    """Last hidden states and outputs (logits, pooler output, or normed [CLS] token)."""
    c = tfam_model.config
    x = _random_images(c.in_channels, c.image_size)
    base = hf_model.vit if hasattr(hf_model, "vit") else hf_model
    tokens = tfam_model.forward_features(x)
    ours = tfam_model.forward_head(tokens)
    out = base(pixel_values=x)
    hidden = out.last_hidden_state
    if base is not hf_model:
        theirs = hf_model(pixel_values=x).logits
    elif out.pooler_output is not None:
        theirs = out.pooler_output
    else:
        theirs = hidden[:, 0]
    return max((tokens - hidden).abs().max().item(), (ours - theirs).abs().max().item())


def _compare_bert(tfam_model: Any, hf_model: Any) -> float:
    """Hidden states and the head's output (logits; pooler output of a BertModel with one)
    on 2 rows of 7 random ids, the second ending in 3 padding tokens."""
    c = tfam_model.config
    length = min(7, c.max_positions)
    ids = _random_ids(c.vocab_size, length)
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[1, max(1, length - 3) :] = False
    ids[~mask] = c.pad_token_id
    hidden = tfam_model.forward_features(ids, mask)
    out = hf_model(input_ids=ids, attention_mask=mask.long(), output_hidden_states=True)
    diffs = [(hidden - out.hidden_states[-1]).abs().max().item()]
    if c.head != "none":
        diffs.append((tfam_model.forward_head(hidden) - out.logits).abs().max().item())
    elif getattr(out, "pooler_output", None) is not None and tfam_model.pooler is not None:
        diffs.append((tfam_model.pool(hidden) - out.pooler_output).abs().max().item())
    return max(diffs)


def _compare_gpt(tfam_model: Any, hf_model: Any) -> float:
    """Logits (GPT2LMHeadModel) or last hidden states (GPT2Model) on 2 rows of 7 random ids."""
    c = tfam_model.config
    ids = _random_ids(c.vocab_size, min(7, c.max_positions))
    if hasattr(hf_model, "lm_head"):
        return (tfam_model(ids) - hf_model(input_ids=ids).logits).abs().max().item()
    hidden = hf_model(input_ids=ids).last_hidden_state
    return (tfam_model.forward_features(ids) - hidden).abs().max().item()


def _compare_marian(tfam_model: Any, hf_model: Any) -> float:
    """Logits on 2 source rows of 7 random ids and 2 target rows of 5 (the start token, then
    random ids), the second row of each ending in padding."""
    c = tfam_model.config
    src = _random_ids(c.vocab_size, min(7, c.max_positions))
    tgt = _random_ids(c.vocab_size, min(5, c.max_positions))
    tgt[:, 0] = c.bos_token_id
    src_mask, tgt_mask = (
        torch.ones_like(src, dtype=torch.bool),
        torch.ones_like(tgt, dtype=torch.bool),
    )
    src_mask[1, max(1, src.shape[1] - 3) :] = False
    tgt_mask[1, max(1, tgt.shape[1] - 2) :] = False
    src[~src_mask], tgt[~tgt_mask] = c.pad_token_id, c.pad_token_id
    ours = tfam_model(src, tgt, src_mask, tgt_mask)
    theirs = hf_model(
        input_ids=src,
        attention_mask=src_mask.long(),
        decoder_input_ids=tgt,
        decoder_attention_mask=tgt_mask.long(),
    ).logits
    return (ours - theirs).abs().max().item()


def _load_hf(src: Path) -> Any:
    """The HF ViT, BERT or GPT-2 saved in src, with no weight left at its random init."""
    hf_config = _read_json(src / "config.json")
    if "family" in hf_config and "model_type" not in hf_config:
        raise ValueError(
            f"SRC={str(src)!r} is a tfam model directory; use `tfam convert tfam-to-hf`"
        )
    model_type = hf_config.get("model_type")
    if model_type not in HF_CLASSES:
        raise ValueError(
            f"model_type={model_type!r} in {src / 'config.json'} is invalid: tfam converts "
            f"Hugging Face directories of model_type {', '.join(map(repr, HF_CLASSES))}"
        )
    classes = HF_CLASSES[model_type]
    architectures = hf_config.get("architectures") or []
    name = next((a for a in architectures if a in classes), None)
    if name is None:
        raise ValueError(
            f"architectures={architectures!r} in {src / 'config.json'} is invalid: expected "
            f"one of {', '.join(classes)} (other heads have no tfam counterpart)"
        )
    transformers = _transformers()
    cls = getattr(transformers, name)
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # missing weights are reported below instead
    try:
        hf, info = cls.from_pretrained(
            src, local_files_only=True, output_loading_info=True, dtype=torch.float32
        )
    finally:
        transformers.logging.set_verbosity(verbosity)
    missing = set(info.get("missing_keys", []))
    if name in _POOLED:
        pooler = {f"{_POOLED[name]}.weight", f"{_POOLED[name]}.bias"}
        if pooler & missing:
            # Saved with add_pooling_layer=False: drop the randomly initialised pooler.
            hf.pooler = None
            missing -= pooler
    if missing or info.get("mismatched_keys"):
        problems = sorted(missing) + [str(m) for m in info.get("mismatched_keys", [])]
        raise ValueError(
            f"{src} does not hold every weight of a {name}: {', '.join(problems[:8])}; "
            "refusing to convert randomly initialised weights"
        )
    return hf.eval()


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
    """OUT/labels.json from the HF config's id2label, for a BERT classifier; -> written."""
    head = getattr(model.config, "head", None)
    if head not in _HEAD_TASKS or (out / "labels.json").is_file():
        return False
    id2label = getattr(hf.config, "id2label", None) or {}
    n = model.config.num_labels
    classes = [str(id2label.get(i, id2label.get(str(i), f"LABEL_{i}"))) for i in range(n)]
    from tfam.cli.text import write_labels

    write_labels(out, _HEAD_TASKS[head], str(src), classes)
    return True


def _hf_to_tfam(args: argparse.Namespace, src: Path, out: Path) -> tuple[Any, Any]:
    """Convert and write; -> (tfam model as reloaded from out, the source HF model)."""
    from tfam.interop import from_hf
    from tfam.models import from_pretrained

    hf = _load_hf(src)
    from_hf(hf, fused_qkv=args.fused_qkv, attention=args.attention).save_pretrained(out)
    return from_pretrained(out), hf


def _id2label(src: Path, model: Any) -> dict[int, str] | None:
    """Class names of a tfam directory: preprocess.json (ViT) or labels.json (BERT)."""
    c = model.config
    if c.family == "vit":
        path, count = src / "preprocess.json", c.num_classes
    elif c.family == "bert" and c.head in _HEAD_TASKS:
        path, count = src / "labels.json", c.num_labels
    else:
        return None
    if not path.is_file():
        return None
    classes = _read_json(path).get("classes")
    if classes and len(classes) == count:
        return {i: str(name) for i, name in enumerate(classes)}
    return None


def _tfam_to_hf(args: argparse.Namespace, src: Path, out: Path) -> tuple[Any, Any]:
    """Convert and write; -> (the source tfam model, HF model as reloaded from out)."""
    from tfam.interop import to_hf
    from tfam.models import from_pretrained

    config = _read_json(src / "config.json")
    if "model_type" in config:
        raise ValueError(
            f"SRC={str(src)!r} is a Hugging Face directory; use `tfam convert hf-to-tfam`"
        )
    model = from_pretrained(src)
    if model.config.family not in ("vit", "bert", "gpt", "transformer"):
        raise ValueError(
            f"SRC={str(src)!r} holds a {model.config.family!r} model: tfam converts ViT, BERT, "
            "GPT and the encoder–decoder Transformer to Hugging Face"
        )
    id2label = _id2label(src, model)
    _transformers()
    options: dict[str, Any] = {} if id2label is None else {"id2label": id2label}
    if id2label is not None and model.config.family == "bert":
        options["label2id"] = {name: i for i, name in id2label.items()}
    to_hf(model, **options).save_pretrained(out)
    return model, _load_hf(out)


def _describe(model: Any) -> str:
    """The shape of a converted model, for the one line that reports the conversion."""
    c = model.config
    text = f"D={c.dim} depth={c.depth} heads={c.heads}"
    if c.family == "vit":
        text += (
            f" image {c.image_size[0]}x{c.image_size[1]} patch {c.patch_size[0]}x"
            f"{c.patch_size[1]} in_channels={c.in_channels} num_classes={c.num_classes}"
        )
        if c.representation_size:
            text += f" representation_size={c.representation_size}"
        return text
    if c.family == "transformer" and c.decoder_depth != c.depth:
        text += f" decoder_depth={c.decoder_depth}"
    text += f" vocab_size={c.vocab_size} max_positions={c.max_positions}"
    if c.family == "bert":
        text += f" head={c.head}"
        if c.head in _HEAD_TASKS:
            text += f" num_labels={c.num_labels}"
        if c.pooler:
            text += " pooler"
    return text


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local directories only, never the hub
    src, out = Path(args.src), Path(args.out)
    _check_dirs(src, out)
    out.mkdir(parents=True, exist_ok=True)
    if args.direction == "hf-to-tfam":
        tfam_model, hf_model = _hf_to_tfam(args, src, out)
    else:
        tfam_model, hf_model = _tfam_to_hf(args, src, out)
    copied = _copy_extras(src, out, args.direction)
    if args.direction == "hf-to-tfam" and _labels_from_hf(hf_model, tfam_model, out, src):
        copied.append("labels.json (from id2label)")
    names = {"vit": "ViT", "bert": "BERT", "gpt": "GPT", "transformer": "Transformer"}
    family = names[tfam_model.config.family]
    target = f"tfam {family}" if args.direction == "hf-to-tfam" else type(hf_model).__name__
    print(
        f"wrote {out} ({target}): {_describe(tfam_model)}"
        + "".join(f" + {name}" for name in copied)
    )
    if not args.check:
        return 0
    # The written directory was reloaded above: compare what is on disk with the source.
    diff = _compare(tfam_model, hf_model)
    ok = diff <= args.atol
    sample = "2 random images" if tfam_model.config.family == "vit" else "2 rows of random ids"
    print(
        f"check: max |diff| between {out} and {src} on {sample} = {diff:.3g} "
        f"({'ok' if ok else 'FAILED'}, atol {args.atol:g})"
    )
    return 0 if ok else 1
