"""`tfam convert`: a local Hugging Face ViT directory <-> a tfam model directory.

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
  python -c "from transformers import ViTForImageClassification as M; M.from_pretrained('hf/digits')"

hf-to-tfam reads HF_DIR/config.json (model_type 'vit'; architectures ViTModel or
ViTForImageClassification) and its weights. A ViTModel pooler becomes tfam's pre-logits layer
(representation_size, num_classes=0). tfam-to-hf names the classes from TFAM_DIR/preprocess.json
when a `tfam train` run wrote one; preprocess.json is copied along in both directions.
"""

HF_CLASSES = ("ViTForImageClassification", "ViTModel")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "convert",
        help="convert a ViT between Hugging Face transformers and tfam directories",
        description="Convert a ViT between a local Hugging Face directory (save_pretrained) and "
        "a tfam model directory, then check the written model against the source.",
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


def _compare(tfam_model: Any, hf_model: Any) -> float:
    """Max |difference| of the last hidden states and of the outputs (logits, pooler output,
    or normed [CLS] token) of the two models on random images."""
    c = tfam_model.config
    x = _random_images(c.in_channels, c.image_size)
    tfam_model.eval()
    hf_model.eval()
    base = hf_model.vit if hasattr(hf_model, "vit") else hf_model
    with torch.no_grad():
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


def _load_hf(src: Path) -> Any:
    """The HF ViT saved in src, with no weight left at its random init."""
    hf_config = _read_json(src / "config.json")
    if "family" in hf_config and "model_type" not in hf_config:
        raise ValueError(
            f"SRC={str(src)!r} is a tfam model directory; use `tfam convert tfam-to-hf`"
        )
    model_type = hf_config.get("model_type")
    if model_type != "vit":
        raise ValueError(
            f"model_type={model_type!r} in {src / 'config.json'} is invalid: tfam converts "
            "Hugging Face ViT directories (model_type 'vit')"
        )
    architectures = hf_config.get("architectures") or []
    name = next((a for a in architectures if a in HF_CLASSES), None)
    if name is None:
        raise ValueError(
            f"architectures={architectures!r} in {src / 'config.json'} is invalid: expected "
            f"one of {', '.join(HF_CLASSES)} (ViTForMaskedImageModeling's decoder has no tfam "
            "counterpart)"
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
    pooler = {"pooler.dense.weight", "pooler.dense.bias"}
    if name == "ViTModel" and pooler & missing:
        # A ViTModel saved with add_pooling_layer=False: drop the randomly initialised pooler.
        hf.pooler = None
        missing -= pooler
    if missing or info.get("mismatched_keys"):
        problems = sorted(missing) + [str(m) for m in info.get("mismatched_keys", [])]
        raise ValueError(
            f"{src} does not hold every weight of a {name}: {', '.join(problems[:8])}; "
            "refusing to convert randomly initialised weights"
        )
    return hf


def _copy_preprocess(src: Path, out: Path) -> bool:
    if (src / "preprocess.json").is_file():
        shutil.copyfile(src / "preprocess.json", out / "preprocess.json")
        return True
    return False


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
    model = from_pretrained(src)
    id2label = None
    preprocess = src / "preprocess.json"
    if preprocess.is_file():
        classes = _read_json(preprocess).get("classes")
        if classes and len(classes) == model.config.num_classes:
            id2label = {i: str(name) for i, name in enumerate(classes)}
    _transformers()
    to_hf(model, id2label=id2label).save_pretrained(out)
    return model, _load_hf(out)


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local directories only, never the hub
    src, out = Path(args.src), Path(args.out)
    _check_dirs(src, out)
    out.mkdir(parents=True, exist_ok=True)
    if args.direction == "hf-to-tfam":
        tfam_model, hf_model = _hf_to_tfam(args, src, out)
    else:
        tfam_model, hf_model = _tfam_to_hf(args, src, out)
    copied = _copy_preprocess(src, out)
    c = tfam_model.config
    target = "tfam ViT" if args.direction == "hf-to-tfam" else type(hf_model).__name__
    print(
        f"wrote {out} ({target}): D={c.dim} depth={c.depth} heads={c.heads} "
        f"image {c.image_size[0]}x{c.image_size[1]} patch {c.patch_size[0]}x{c.patch_size[1]} "
        f"in_channels={c.in_channels} num_classes={c.num_classes}"
        + (f" representation_size={c.representation_size}" if c.representation_size else "")
        + (" + preprocess.json" if copied else "")
    )
    if not args.check:
        return 0
    # The written directory was reloaded above: compare what is on disk with the source.
    diff = _compare(tfam_model, hf_model)
    ok = diff <= args.atol
    print(
        f"check: max |diff| between {out} and {src} on 2 random images = {diff:.3g} "
        f"({'ok' if ok else 'FAILED'}, atol {args.atol:g})"
    )
    return 0 if ok else 1
