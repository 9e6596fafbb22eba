"""Families: compositions of layers, plus the registry of named presets."""

from tfam.models.base import MODEL_CLASSES, TfamModel, from_pretrained
from tfam.models.bert import Bert, BertConfig, mean_pool
from tfam.models.gpt import GPT, GPTConfig
from tfam.models.registry import PRESETS, count_parameters, create_config, create_model, list_models
from tfam.models.transformer import Transformer, TransformerConfig
from tfam.models.vit import ViT, ViTConfig

__all__ = [
    "Bert",
    "BertConfig",
    "GPT",
    "GPTConfig",
    "MODEL_CLASSES",
    "PRESETS",
    "TfamModel",
    "Transformer",
    "TransformerConfig",
    "ViT",
    "ViTConfig",
    "count_parameters",
    "create_config",
    "create_model",
    "from_pretrained",
    "list_models",
    "mean_pool",
]
