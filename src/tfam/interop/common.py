"""What every Hugging Face converter shares: the optional transformers import, the activation
and attention correspondences, the refusals of the ``to_hf`` contract (one ValueError naming the
field), the drop_path warning, building the HF model without moving the caller's RNG, and the
reproducible random batches that ``tfam convert`` checks a conversion on.

A converter module (``hf_<name>.py``) imports these and registers itself with
:func:`tfam.interop.registry.register_converter`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

INSTALL_HINT = (
    "Hugging Face interop needs the optional `transformers` package: "
    "pip install 'transformers>=4.40' (or pip install -e '.[dev]' in a tfam checkout)"
)

# HF hidden_act -> tfam activation. Only exact counterparts: 'gelu_new' is the tanh formula
# written out, the same function as torch's approximate='tanh' up to float rounding.
HF_TO_TFAM_ACT = {
    "gelu": "gelu",
    "gelu_python": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
    "quick_gelu": "quick_gelu",
    "silu": "silu",
    "swish": "silu",
}
# tfam activation -> HF hidden_act; 'gelu_pytorch_tanh' calls the same torch kernel as tfam.
TFAM_TO_HF_ACT = {
    "gelu": "gelu",
    "gelu_tanh": "gelu_pytorch_tanh",
    "quick_gelu": "quick_gelu",
    "relu": "relu",
    "silu": "silu",
}
# tfam kernels that compute exact softmax attention, and the HF implementation that matches.
TFAM_TO_HF_ATTN = {"math": "eager", "sdpa": "sdpa", "auto": "sdpa"}


def require_transformers() -> Any:
    """Import transformers or fail with an install hint."""
    try:
        import transformers
    except ImportError as err:
        raise ImportError(INSTALL_HINT) from err
    return transformers


def refusal(target: str) -> Callable[[str, Any, str], ValueError]:
    """``refuse(name, value, why)`` -> the one-line ValueError of the ``to_hf`` contract:
    "name=value cannot be converted to TARGET: why"."""

    def refuse(name: str, value: Any, why: str) -> ValueError:
        return ValueError(f"{name}={value!r} cannot be converted to {target}: {why}")

    return refuse


def refuse_unlike_blocks(
    config: Any,
    target: str,
    short: str,
    *,
    norm_first: bool,
    final_norm: bool = True,
    norm_eps: float | None = None,
) -> None:
    """The refusals the converters share: RMSNorm (HF uses LayerNorm), another LayerNorm eps
    where the HF model fixes one (``norm_eps``), blocks of the other norm placement, a final
    norm where the HF model has none or none where it has one, and gated or unknown
    activations; ``short`` names the HF model in the reasons ("HF ViT", "GPT-2", "Marian")."""
    refuse = refusal(target)
    if config.norm != "layernorm":
        raise refuse("norm", config.norm, f"{short} uses LayerNorm")
    if norm_eps is not None and config.norm_eps != norm_eps:
        raise refuse("norm_eps", config.norm_eps, f"{short}'s LayerNorm eps is {norm_eps}")
    if config.norm_first != norm_first:
        placement = "pre-norm" if norm_first else "post-norm"
        raise refuse("norm_first", config.norm_first, f"{short} blocks are {placement}")
    if config.final_norm != final_norm:
        why = "always applies a final LayerNorm" if final_norm else "has no final LayerNorm"
        raise refuse("final_norm", config.final_norm, f"{short} {why}")
    if config.activation not in TFAM_TO_HF_ACT:
        raise refuse(
            "activation",
            config.activation,
            f"{short}'s MLP is not gated; convertible: {', '.join(map(repr, TFAM_TO_HF_ACT))}",
        )


def activation_from_hf(act: Any, name: str = "hidden_act") -> str:
    """The tfam activation of an HF activation name; a one-line ValueError naming ``name``
    when tfam has no exact counterpart."""
    if not isinstance(act, str) or act not in HF_TO_TFAM_ACT:
        raise ValueError(
            f"{name}={act!r} is invalid for conversion: tfam has exact counterparts for "
            f"{', '.join(map(repr, HF_TO_TFAM_ACT))}"
        )
    return HF_TO_TFAM_ACT[act]


def encoder_fields_to_hf(config: Any) -> dict[str, Any]:
    """The fields HF's BERT-style configs (BertConfig, ViTConfig) name alike, from a tfam
    config: widths, depth, heads, activation, dropouts, init and norm epsilon."""
    return dict(
        hidden_size=config.dim,
        num_hidden_layers=config.depth,
        num_attention_heads=config.heads,
        intermediate_size=config.ffn_dim,
        hidden_act=TFAM_TO_HF_ACT[config.activation],
        hidden_dropout_prob=config.dropout,
        attention_probs_dropout_prob=config.attn_dropout,
        initializer_range=config.init_std,
        layer_norm_eps=config.norm_eps,
    )


def refuse_inexact_attention(
    attention: str, target: str, options: dict[str, Any] | None = None
) -> None:
    """A ValueError naming ``attention`` (or one of its ``options``) when it has no Hugging
    Face counterpart: only the exact softmax kernels with dot-product scores scaled by
    1/sqrt(Dh) convert, so a converted model never computes something else (``math``'s other
    normalizers, scales and additive scores, with their own parameters, have none)."""
    if attention not in TFAM_TO_HF_ATTN:
        raise ValueError(
            f"attention={attention!r} cannot be converted to {target}: only the exact softmax "
            f"kernels {', '.join(map(repr, TFAM_TO_HF_ATTN))} have an HF counterpart; if this "
            "kernel is exact, call model.set_attention('sdpa') first"
        )
    standard = {"normalizer": "softmax", "scale": "head", "score": "dot", "score_dim": None}
    for name, value in (options or {}).items():
        if name in standard and value != standard[name]:
            raise ValueError(
                f"attention_options.{name}={value!r} cannot be converted to {target}: it "
                "computes softmax(Q K^T / sqrt(Dh)) only"
            )


def warn_drop_path_dropped(drop_path: float, target: str) -> None:
    """Hugging Face's ViT, BERT and GPT-2 have no stochastic depth: say it is left out."""
    if drop_path:
        warnings.warn(
            f"drop_path={drop_path} is dropped: {target} has no stochastic depth (eval outputs "
            "are unchanged; training the HF model will differ)",
            stacklevel=4,
        )


def build_hf_model(make: Callable[[], Any], like: nn.Module) -> Any:
    """``make()``'s Hugging Face model, on ``like``'s device and dtype, built under a forked RNG:
    HF initialises a new model randomly before tfam's weights are copied in, and that must not
    move the caller's random stream."""
    with torch.random.fork_rng(devices=[]):
        hf = make()
    param = next(like.parameters())
    return hf.to(device=param.device, dtype=param.dtype)


def refuse_unused_weights(names: Iterable[str], family: str) -> None:
    """A one-line ValueError listing HF weights that no tfam weight took (the first 8)."""
    left = sorted(names)
    if left:
        raise ValueError(
            f"hf_model has weights tfam's {family} cannot represent: {', '.join(left[:8])}"
            + (" ..." if len(left) > 8 else "")
        )


def gather_weights(
    hf_state: Mapping[str, torch.Tensor], pairs: Iterable[tuple[Sequence[str], str]]
) -> tuple[dict[str, torch.Tensor], set[str]]:
    """The tfam weights of ``pairs`` (HF names, tfam name): the named HF tensors concatenated
    along dim 0 (Q, K, V into one fused qkv), and the HF names used; a one-line ValueError
    naming the first HF weight missing. torch.cat copies, even one tensor: the tfam model must
    not share storage with the HF model."""
    state: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    for hf_names, tfam_name in pairs:
        missing = [n for n in hf_names if n not in hf_state]
        if missing:
            raise ValueError(f"hf_model has no weight {missing[0]!r}; cannot convert it")
        state[tfam_name] = torch.cat([hf_state[n].detach() for n in hf_names], dim=0)
        used.update(hf_names)
    return state, used


def random_images(in_channels: int, image_size: tuple[int, int]) -> torch.Tensor:
    """Two reproducible random images (B=2, C, H, W) for a conversion check."""
    g = torch.Generator().manual_seed(0)
    return torch.randn(2, in_channels, *image_size, generator=g)


def random_ids(vocab_size: int, length: int) -> torch.Tensor:
    """Two reproducible rows of random token ids (B=2, L) for a conversion check."""
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, vocab_size, (2, length), generator=g)


__all__ = [
    "HF_TO_TFAM_ACT",
    "INSTALL_HINT",
    "TFAM_TO_HF_ACT",
    "TFAM_TO_HF_ATTN",
    "activation_from_hf",
    "build_hf_model",
    "encoder_fields_to_hf",
    "gather_weights",
    "random_ids",
    "random_images",
    "refusal",
    "refuse_inexact_attention",
    "refuse_unlike_blocks",
    "refuse_unused_weights",
    "require_transformers",
    "warn_drop_path_dropped",
]
