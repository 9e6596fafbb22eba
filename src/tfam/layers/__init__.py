"""Bricks: tensor in, tensor out, no task knowledge. Built from a config, never from a family."""

from tfam.layers.attention import MultiHeadAttention
from tfam.layers.block import DecoderBlock, DropPath, EncoderBlock, TransformerStack
from tfam.layers.cache import CrossKV, KVCache, LayerCache, StackCache
from tfam.layers.chunked import ChunkedKernel, chunked_attention
from tfam.layers.conv import (
    BasicLayer,
    BottleNeckLayer,
    ConvBackbone,
    ConvEncoder,
    ConvLayer,
    ConvSpec,
    ConvStem,
)
from tfam.layers.edges import EdgesKernel, edge_attention
from tfam.layers.embedding import PatchEmbed
from tfam.layers.feedforward import FeedForward
from tfam.layers.flex import FlexKernel, flex_call
from tfam.layers.kernels import (
    KERNELS,
    AttentionKernel,
    build_kernel,
    math_attention,
    sdpa_attention,
)
from tfam.layers.linear_attention import LinearKernel, RunningSums, linear_attention
from tfam.layers.local import LocalKernel, local_attention
from tfam.layers.lsh import LSHKernel, lsh_attention
from tfam.layers.masks import (
    GraphMask,
    causal_mask,
    combine,
    graph_mask,
    pad_token_mask,
    padding_mask,
    window_mask,
)
from tfam.layers.norm import LayerNorm, RMSNorm, TokenBatchNorm, make_norm
from tfam.layers.performer import PerformerKernel
from tfam.layers.position import (
    ALiBi,
    AxialRotaryEmbedding,
    PositionScheme,
    RotaryEmbedding,
    TokenPositions,
    alibi_slopes,
    build_position,
    resample_pos_embed,
    sincos_2d_table,
    sinusoidal_table,
)
from tfam.layers.positions_extra import (
    GeneratedPosition,
    RelativePosition,
    T5RelativeBias,
    relative_position_bucket,
)
from tfam.layers.sparse import BlockSparseKernel, LongformerKernel, sparse_attention
from tfam.layers.stages import PatchMerging, Stage, StageSpec, StageStack
from tfam.layers.windows import RelativePositionBias, TokenPartition, WindowPartition

__all__ = [
    "BasicLayer",
    "BottleNeckLayer",
    "ConvBackbone",
    "ConvEncoder",
    "ConvLayer",
    "ConvSpec",
    "ConvStem",
    "KERNELS",
    "ALiBi",
    "AxialRotaryEmbedding",
    "PositionScheme",
    "RotaryEmbedding",
    "TokenPositions",
    "build_position",
    "alibi_slopes",
    "AttentionKernel",
    "BlockSparseKernel",
    "ChunkedKernel",
    "CrossKV",
    "DecoderBlock",
    "DropPath",
    "EdgesKernel",
    "EncoderBlock",
    "FeedForward",
    "FlexKernel",
    "GeneratedPosition",
    "GraphMask",
    "KVCache",
    "LinearKernel",
    "PerformerKernel",
    "RunningSums",
    "linear_attention",
    "LayerCache",
    "LayerNorm",
    "LocalKernel",
    "LongformerKernel",
    "LSHKernel",
    "MultiHeadAttention",
    "PatchEmbed",
    "PatchMerging",
    "RMSNorm",
    "TokenBatchNorm",
    "RelativePosition",
    "RelativePositionBias",
    "StackCache",
    "Stage",
    "StageSpec",
    "StageStack",
    "T5RelativeBias",
    "TokenPartition",
    "TransformerStack",
    "build_kernel",
    "causal_mask",
    "chunked_attention",
    "combine",
    "edge_attention",
    "flex_call",
    "graph_mask",
    "local_attention",
    "lsh_attention",
    "make_norm",
    "math_attention",
    "pad_token_mask",
    "padding_mask",
    "relative_position_bucket",
    "resample_pos_embed",
    "sdpa_attention",
    "sparse_attention",
    "sincos_2d_table",
    "sinusoidal_table",
    "window_mask",
    "WindowPartition",
]
