"""Bricks: tensor in, tensor out, no task knowledge. Built from a config, never from a family."""

from tfam.layers.attention import MultiHeadAttention
from tfam.layers.block import DecoderBlock, DropPath, EncoderBlock, TransformerStack
from tfam.layers.cache import CrossKV, KVCache, LayerCache, StackCache
from tfam.layers.chunked import ChunkedKernel, chunked_attention
from tfam.layers.embedding import PatchEmbed
from tfam.layers.feedforward import FeedForward
from tfam.layers.kernels import (
    KERNELS,
    AttentionKernel,
    build_kernel,
    math_attention,
    sdpa_attention,
)
from tfam.layers.lsh import LSHKernel, lsh_attention
from tfam.layers.masks import causal_mask, combine, pad_token_mask, padding_mask, window_mask
from tfam.layers.norm import LayerNorm, RMSNorm, make_norm
from tfam.layers.position import (
    ALiBi,
    PositionScheme,
    RotaryEmbedding,
    TokenPositions,
    alibi_slopes,
    build_position,
    resample_pos_embed,
    sincos_2d_table,
    sinusoidal_table,
)
from tfam.layers.stages import PatchMerging, Stage, StageSpec, StageStack
from tfam.layers.windows import TokenPartition, WindowPartition

__all__ = [
    "KERNELS",
    "ALiBi",
    "PositionScheme",
    "RotaryEmbedding",
    "TokenPositions",
    "build_position",
    "alibi_slopes",
    "AttentionKernel",
    "ChunkedKernel",
    "CrossKV",
    "DecoderBlock",
    "DropPath",
    "EncoderBlock",
    "FeedForward",
    "KVCache",
    "LayerCache",
    "LayerNorm",
    "LSHKernel",
    "MultiHeadAttention",
    "PatchEmbed",
    "PatchMerging",
    "RMSNorm",
    "StackCache",
    "Stage",
    "StageSpec",
    "StageStack",
    "TokenPartition",
    "TransformerStack",
    "build_kernel",
    "causal_mask",
    "chunked_attention",
    "combine",
    "lsh_attention",
    "make_norm",
    "math_attention",
    "pad_token_mask",
    "padding_mask",
    "resample_pos_embed",
    "sdpa_attention",
    "sincos_2d_table",
    "sinusoidal_table",
    "window_mask",
    "WindowPartition",
]
