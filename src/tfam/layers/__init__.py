"""Bricks: tensor in, tensor out, no task knowledge."""

from tfam.layers.attention import MultiHeadAttention
from tfam.layers.block import DropPath, Encoder, EncoderBlock
from tfam.layers.embedding import PatchEmbed
from tfam.layers.feedforward import FeedForward
from tfam.layers.kernels import KERNELS, get_kernel, math_attention, register_kernel, sdpa_attention
from tfam.layers.norm import LayerNorm, RMSNorm, make_norm
from tfam.layers.position import resample_pos_embed, sinusoidal_table

__all__ = [
    "KERNELS",
    "DropPath",
    "Encoder",
    "EncoderBlock",
    "FeedForward",
    "LayerNorm",
    "MultiHeadAttention",
    "PatchEmbed",
    "RMSNorm",
    "get_kernel",
    "make_norm",
    "math_attention",
    "register_kernel",
    "resample_pos_embed",
    "sdpa_attention",
    "sinusoidal_table",
]
