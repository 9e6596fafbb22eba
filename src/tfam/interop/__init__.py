"""Converters between tfam models and their Hugging Face transformers counterparts.

``from_hf(hf_model)`` returns the tfam model with identical outputs; ``to_hf(model)`` goes back
where the family has a Hugging Face counterpart. transformers is optional: it is imported only
when a conversion runs (ImportError with an install hint otherwise).

Families: ViT (``transformers.ViTModel``, ``transformers.ViTForImageClassification``), see
:mod:`tfam.interop.hf_vit`; GPT-2 (``GPT2LMHeadModel``, ``GPT2Model``), see
:mod:`tfam.interop.hf_gpt2`.
BERT (``BertModel``, ``BertForMaskedLM``, ``BertForTokenClassification``,
``BertForSequenceClassification``), see :mod:`tfam.interop.hf_bert`; the packaged
all-MiniLM-L6-v2 (pretrained weights of preset ``minilm_l6``), see :mod:`tfam.interop.minilm`.
The encoder–decoder Transformer (``MarianMTModel``), see :mod:`tfam.interop.hf_marian`.
"""

from __future__ import annotations

from typing import Any

from torch import nn

# Registers the packaged MiniLM's weights as preset "minilm_l6"'s pretrained weights
# (tfam.models.load_pretrained); importing tfam imports this package.
from tfam.interop import minilm as _minilm  # noqa: F401


def from_hf(hf_model: Any, **options: Any) -> nn.Module:
    """The tfam model computing what a Hugging Face model computes, with copies of its weights.

    ``options`` go to the family's converter (ViT: ``fused_qkv=True``, ``attention='sdpa'``).
    """
    model_type = getattr(getattr(hf_model, "config", None), "model_type", None)
    if model_type == "bert":
        from tfam.interop.hf_bert import bert_from_hf

        return bert_from_hf(hf_model, **options)
    if model_type == "vit":
        from tfam.interop.hf_vit import vit_from_hf

        return vit_from_hf(hf_model, **options)
    if model_type == "gpt2":
        from tfam.interop.hf_gpt2 import gpt2_from_hf

        return gpt2_from_hf(hf_model, **options)
    if model_type == "marian":
        from tfam.interop.hf_marian import marian_from_hf

        return marian_from_hf(hf_model, **options)
    raise ValueError(
        f"hf_model={type(hf_model).__name__} (model_type={model_type!r}) is invalid: "
        "tfam converts Hugging Face ViT models (model_type 'vit': ViTModel, "
        "ViTForImageClassification; 'gpt2': GPT2LMHeadModel, GPT2Model; 'marian': MarianMTModel)"
    )


def to_hf(model: nn.Module, **options: Any) -> nn.Module:
    """The Hugging Face model computing what a tfam model computes, with copies of its weights.

    ``options`` go to the family's converter (ViT: ``attn_implementation``, ``id2label``).
    """
    family = getattr(getattr(model, "config", None), "family", None)
    if family == "bert":
        from tfam.interop.hf_bert import bert_to_hf

        return bert_to_hf(model, **options)  # type: ignore[arg-type]
    if family == "vit":
        from tfam.interop.hf_vit import vit_to_hf

        return vit_to_hf(model, **options)  # type: ignore[arg-type]
    if family == "gpt":
        from tfam.interop.hf_gpt2 import gpt2_to_hf

        return gpt2_to_hf(model, **options)  # type: ignore[arg-type]
    if family == "transformer":
        from tfam.interop.hf_marian import marian_to_hf

        return marian_to_hf(model, **options)  # type: ignore[arg-type]
    raise ValueError(
        f"model={type(model).__name__} (family {family!r}) is invalid: tfam converts to "
        "Hugging Face for these families: 'vit', 'gpt', 'transformer'"
    )


__all__ = ["from_hf", "to_hf"]
