"""Families: compositions of layers, plus the registries of named presets and of the presets
with pretrained weights."""

from tfam.models.base import MODEL_CLASSES, AttentionWeights, TfamModel, from_pretrained
from tfam.models.bert import Bert, BertConfig, mean_pool
from tfam.models.cnn import CNN, CNNConfig
from tfam.models.deit import DeiT, DeiTConfig
from tfam.models.gpt import GPT, GPTConfig
from tfam.models.graph import GraphConfig, GraphTransformer
from tfam.models.igpt import IGPT, IGPTConfig
from tfam.models.registry import (
    PRESETS,
    count_parameters,
    create_config,
    create_model,
    has_pretrained,
    list_models,
    list_pretrained,
    load_pretrained,
    register_pretrained,
)
from tfam.models.speech import Speech, SpeechConfig
from tfam.models.swin import Swin, SwinConfig
from tfam.models.transformer import Transformer, TransformerConfig
from tfam.models.vit import ViT, ViTConfig

__all__ = [
    "AttentionWeights",
    "Bert",
    "BertConfig",
    "CNN",
    "CNNConfig",
    "DeiT",
    "DeiTConfig",
    "GPT",
    "GPTConfig",
    "GraphConfig",
    "GraphTransformer",
    "IGPT",
    "IGPTConfig",
    "MODEL_CLASSES",
    "PRESETS",
    "Speech",
    "SpeechConfig",
    "Swin",
    "SwinConfig",
    "TfamModel",
    "Transformer",
    "TransformerConfig",
    "ViT",
    "ViTConfig",
    "count_parameters",
    "create_config",
    "create_model",
    "from_pretrained",
    "has_pretrained",
    "list_models",
    "list_pretrained",
    "load_pretrained",
    "mean_pool",
    "register_pretrained",
]
