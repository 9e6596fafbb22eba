"""Converters between tfam models and their Hugging Face transformers counterparts.

``from_hf(hf_model)`` returns the tfam model with identical outputs; ``to_hf(model)`` goes back
where the family has a Hugging Face counterpart. transformers is optional: it is imported only
when a conversion runs (ImportError with an install hint otherwise).

One module per counterpart, each registering itself (:mod:`tfam.interop.registry`); importing
this package imports every ``hf_*`` module in it: ViT (``ViTModel``,
``ViTForImageClassification``), see :mod:`tfam.interop.hf_vit`; GPT-2 (``GPT2LMHeadModel``,
``GPT2Model``), see :mod:`tfam.interop.hf_gpt2`; BERT (``BertModel``, ``BertForMaskedLM``,
``BertForTokenClassification``, ``BertForSequenceClassification``), see
:mod:`tfam.interop.hf_bert`. What they share is :mod:`tfam.interop.common`. The packaged
all-MiniLM-L6-v2 (pretrained weights of preset ``minilm_l6``), see :mod:`tfam.interop.minilm`.
The encoder–decoder Transformer (``MarianMTModel``), see :mod:`tfam.interop.hf_marian`.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from torch import nn

# Registers the packaged MiniLM's weights as preset "minilm_l6"'s pretrained weights
# (tfam.models.load_pretrained); importing tfam imports this package.
from tfam.interop import minilm as _minilm  # noqa: F401
from tfam.interop.registry import CONVERTERS, converter_for_hf, converter_for_model

# Every converter module registers itself on import (none imports transformers at load time).
for _module in pkgutil.iter_modules(__path__):
    if _module.name.startswith("hf_"):
        importlib.import_module(f"{__name__}.{_module.name}")


def from_hf(hf_model: Any, **options: Any) -> nn.Module:
    """The tfam model computing what a Hugging Face model computes, with copies of its weights.

    ``options`` go to the family's converter (``fused_qkv=True``, ``attention='sdpa'``).
    """
    return converter_for_hf(hf_model).from_hf(hf_model, **options)


def to_hf(model: nn.Module, **options: Any) -> nn.Module:
    """The Hugging Face model computing what a tfam model computes, with copies of its weights.

    ``options`` go to the family's converter (``attn_implementation``, ``id2label``).
    """
    converter = converter_for_model(model)
    assert converter.to_hf is not None
    return converter.to_hf(model, **options)


__all__ = ["CONVERTERS", "from_hf", "to_hf"]
