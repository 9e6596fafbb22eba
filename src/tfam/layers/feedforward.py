"""The position-wise MLP: expand D -> ffn_dim, activation, project back to D."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tfam.config import BaseConfig


def quick_gelu(x: Tensor) -> Tensor:
    """x * sigmoid(1.702 x): GELU's sigmoid approximation (Hendrycks & Gimpel 2016, sec. 2),
    the activation of OpenAI's iGPT and CLIP (Hugging Face's ``quick_gelu``)."""
    return x * torch.sigmoid(1.702 * x)


def _quick_gelu_(x: Tensor) -> Tensor:
    return x.mul_(torch.sigmoid(1.702 * x))


_PLAIN = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "quick_gelu": quick_gelu,
    "silu": F.silu,
}
_GATED = {"swiglu": F.silu, "geglu": F.gelu}
# In-place forms, used when no gradient is recorded: the hidden (B, L, ffn_dim) is the largest
# activation of a block, and overwriting it saves a fresh allocation and a memory pass.
_PLAIN_INPLACE = {
    "relu": torch.relu_,
    "gelu": torch.ops.aten.gelu_,
    "gelu_tanh": lambda x: torch.ops.aten.gelu_(x, approximate="tanh"),
    "quick_gelu": _quick_gelu_,
    "silu": lambda x: F.silu(x, inplace=True),
}


class FeedForward(nn.Module):
    """X2 = act(X W1 + b1) W2 + b2; gated kinds use act(X W1) * (X V) (Shazeer 2020).

    Built from a config's ``dim``, ``ffn_dim`` and ``activation``. Dropout is the block's
    business (it applies it after the residual branch).

    (B, L, D) -> (B, L, D); the hidden is (B, L, ffn_dim).
    """

    def __init__(self, config: BaseConfig) -> None:
        super().__init__()
        dim, ffn_dim, activation = config.dim, config.ffn_dim, config.activation
        assert ffn_dim is not None  # the config fills it in
        self.activation = activation
        self.gated = activation in _GATED
        self.act = _GATED[activation] if self.gated else _PLAIN[activation]
        self.act_ = None if self.gated else _PLAIN_INPLACE[activation]
        self.fc1 = nn.Linear(dim, (2 if self.gated else 1) * ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        h = self.fc1(x)
        if self.gated:
            gate, up = h.chunk(2, dim=-1)
            h = self.act(gate) * up
        elif self.act_ is not None and not torch.is_grad_enabled():
            h = self.act_(h)
        else:
            h = self.act(h)
        return self.fc2(h)
