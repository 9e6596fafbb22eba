"""The converters between tfam families and their Hugging Face counterparts, registered by name.

A converter module (``interop/hf_<name>.py``, imported by ``import tfam``: every ``hf_*``
module of this package is) ends with one call::

    register_converter(Converter(
        model_type="marian",                  # the HF config's model_type it reads
        family=Transformer,                   # the tfam model class it makes
        hf_classes=("MarianMTModel",),        # transformers classes from_hf takes
        from_hf=marian_from_hf,               # (hf_model, **options) -> tfam model
        to_hf=marian_to_hf,                   # (model, **options) -> HF model, or None
        compare=compare,                      # (tfam_model, hf_model) -> max |difference|
    ))

Then ``tfam.interop.from_hf`` / ``to_hf`` and ``tfam convert`` take it, and the family lists it
in ``Family.converters``. Nothing else names a family.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfam.models.base import TfamModel


@dataclass(frozen=True)
class Converter:
    """One Hugging Face counterpart of a tfam family.

    ``compare(tfam_model, hf_model)`` is the largest |difference| of the two models' outputs on
    a reproducible random batch (``sample`` says what, for messages); ``optional_pooler`` maps
    an HF class to its pooler's weight prefix when a file may lack it (saved with
    ``add_pooling_layer=False``); ``read_dir(path)`` reads an HF directory without transformers,
    where the converter can."""

    model_type: str
    family: type[TfamModel]
    hf_classes: tuple[str, ...]
    from_hf: Callable[..., TfamModel]
    to_hf: Callable[..., Any] | None = None
    compare: Callable[[Any, Any], float] | None = None
    sample: str = "2 rows of random ids"
    optional_pooler: dict[str, str] = field(default_factory=dict)
    read_dir: Callable[..., TfamModel] | None = None


CONVERTERS: dict[str, Converter] = {}


def register_converter(converter: Converter) -> Converter:
    """Register ``converter`` under its ``model_type`` (a reload replaces it) and add it to its
    family's ``converters``."""
    CONVERTERS[converter.model_type] = converter
    family = converter.family
    # Without an earlier copy of this converter (a module reload registers it again).
    kept = [c for c in family.converters if c.model_type != converter.model_type]
    family.converters = (*kept, converter)
    return converter


def converter_for_hf(hf_model: Any) -> Converter:
    """The converter of a Hugging Face model, by its ``config.model_type``."""
    model_type = getattr(getattr(hf_model, "config", None), "model_type", None)
    if model_type in CONVERTERS:
        return CONVERTERS[model_type]
    raise ValueError(
        f"hf_model={type(hf_model).__name__} (model_type={model_type!r}) is invalid: tfam "
        f"converts Hugging Face models of {describe_hf_classes()}"
    )


def converter_for_model(model: Any) -> Converter:
    """The converter that writes ``model`` (a tfam model) as a Hugging Face model."""
    for converter in getattr(type(model), "converters", ()):
        if converter.to_hf is not None:
            return converter
    family = getattr(getattr(model, "config", None), "family", None)
    families = sorted({c.family.config_class.family for c in CONVERTERS.values() if c.to_hf})
    raise ValueError(
        f"model={type(model).__name__} (family {family!r}) is invalid: tfam converts to "
        f"Hugging Face for these families: {', '.join(map(repr, families))}"
    )


def load_hf_directory(path: str | Path, *, quiet: bool = False) -> Any:
    """The Hugging Face model saved in ``path`` (``save_pretrained``: config.json + weights) as
    the registered class its ``architectures`` names, in float32 and eval mode, local files
    only; refused (one line) when a weight would be left at its random init (a pooler the file
    lacks is dropped instead, for the classes a converter names in ``optional_pooler``).
    ``quiet`` turns transformers' progress bars off (a command prints its own lines)."""
    import json

    import torch

    from tfam.interop.common import require_transformers

    path = Path(path)
    config_path = path / "config.json"
    try:
        hf_config = json.loads(config_path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{config_path} is not valid JSON: {err}") from err
    model_type = hf_config.get("model_type")
    if model_type not in CONVERTERS:
        raise ValueError(
            f"model_type={model_type!r} in {config_path} is invalid: tfam converts "
            f"Hugging Face directories of model_type {', '.join(map(repr, CONVERTERS))}"
        )
    converter = CONVERTERS[model_type]
    classes = converter.hf_classes
    architectures = hf_config.get("architectures") or []
    name = next((a for a in architectures if a in classes), None)
    if name is None:
        raise ValueError(
            f"architectures={architectures!r} in {config_path} is invalid: expected "
            f"one of {', '.join(classes)} (other heads have no tfam counterpart)"
        )
    transformers = require_transformers()
    if quiet:
        transformers.utils.logging.disable_progress_bar()
    cls = getattr(transformers, name)
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # missing weights are reported below instead
    try:
        hf, info = cls.from_pretrained(
            path, local_files_only=True, output_loading_info=True, dtype=torch.float32
        )
    finally:
        transformers.logging.set_verbosity(verbosity)
    missing = set(info.get("missing_keys", []))
    if name in converter.optional_pooler:
        prefix = converter.optional_pooler[name]
        pooler = {f"{prefix}.weight", f"{prefix}.bias"}
        if pooler & missing:
            # Saved with add_pooling_layer=False: drop the randomly initialised pooler.
            hf.pooler = None
            missing -= pooler
    if missing or info.get("mismatched_keys"):
        problems = sorted(missing) + [str(m) for m in info.get("mismatched_keys", [])]
        raise ValueError(
            f"{path} does not hold every weight of a {name}: {', '.join(problems[:8])}; "
            "refusing to convert randomly initialised weights"
        )
    return hf.eval()


def describe_hf_classes() -> str:
    """ "model_type 'bert' (BertModel, ...), 'gpt2' (...)": what ``from_hf`` takes."""
    return "model_type " + "; ".join(
        f"{name!r} ({', '.join(c.hf_classes)})" for name, c in sorted(CONVERTERS.items())
    )


__all__ = [
    "CONVERTERS",
    "Converter",
    "converter_for_hf",
    "converter_for_model",
    "describe_hf_classes",
    "load_hf_directory",
    "register_converter",
]
