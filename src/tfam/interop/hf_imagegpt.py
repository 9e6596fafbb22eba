"""Hugging Face ImageGPT <-> tfam iGPT: configs, weights, and what cannot cross.

``imagegpt_from_hf(hf_model)`` turns a transformers ``ImageGPTForCausalImageModeling``,
``ImageGPTForImageClassification`` or ``ImageGPTModel`` into a tfam :class:`~tfam.models.igpt.IGPT`
(head ``"lm"``, ``"sequence"`` or ``"none"``) with the same outputs; ``imagegpt_to_hf(model)``
gives back the class of its head. Both copy every weight (no shared storage) and refuse, with a
``ValueError`` naming the setting, what the other side would compute differently.

ImageGPT is GPT-2's layout (``Conv1D`` projections stored (in, out); ``c_attn`` the fused
[q | k | v]; the weight names of :mod:`tfam.interop.hf_gpt2`) with three differences: its
norms have a gain and no bias and do not subtract the mean (tfam's ``rmsnorm``), its MLP's
activation is ``quick_gelu``, and its LM head is untied and scores ``vocab_size - 1`` ids (the
start token, the last id, is never predicted).

=======================================  =====================================================
HF (``transformer.`` prefix on the heads) tfam
=======================================  =====================================================
wte / wpe                                tok_embed.weight / pos_embed
h.i.ln_1 / ln_2 (weight only)            stack.blocks.i.norm1 / norm2 (RMSNorm)
h.i.attn.c_attn / c_proj, h.i.mlp.*      as GPT-2's (transposed)
ln_f (weight only)                       norm
lm_head (V - 1 rows, no bias)            lm_head
score (classification, no bias)          score
=======================================  =====================================================
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

import tfam.interop.common as common
from tfam.interop.hf_gpt2 import _block_pairs, gpt2_style_fields
from tfam.interop.registry import Converter, register_converter
from tfam.models.igpt import IGPT, IGPTConfig

if TYPE_CHECKING:  # transformers is optional: imported only when a conversion runs
    from transformers import PreTrainedModel

# The causal-mask buffer of each attention (not a weight).
_MASK_BUFFER = re.compile(r"(^|\.)h\.\d+\.attn\.(bias|masked_bias)$")
# HF class -> tfam head.
_HEADS = {
    "ImageGPTForCausalImageModeling": "lm",
    "ImageGPTForImageClassification": "sequence",
    "ImageGPTModel": "none",
}
_HEAD_WEIGHTS = {"lm": "lm_head.weight", "sequence": "score.weight"}


def weight_pairs(config: IGPTConfig) -> list[tuple[str, list[str], bool]]:
    """Every (HF name without the ``transformer.`` prefix, tfam names, transposed) of a
    config: GPT-2's block pairs without the norm biases, and the head's weight."""
    pairs: list[tuple[str, list[str], bool]] = [
        ("wte.weight", ["tok_embed.weight"], False),
        ("wpe.weight", ["pos_embed"], False),
    ]
    for i in range(config.depth):
        pairs += [
            p for p in _block_pairs(i, config.fused_qkv) if not re.search(r"\.ln_[12]\.bias$", p[0])
        ]
    pairs.append(("ln_f.weight", ["norm.weight"], False))
    if config.head in _HEAD_WEIGHTS:
        name = _HEAD_WEIGHTS[config.head]
        pairs.append((name, [name], False))
    return pairs


def config_from_hf(
    hf_config: Any, head: str, *, fused_qkv: bool = True, attention: str = "sdpa"
) -> IGPTConfig:
    """tfam IGPTConfig for an HF ImageGPTConfig; refuses settings tfam computes differently."""
    if getattr(hf_config, "tie_word_embeddings", False):
        raise ValueError(
            "tie_word_embeddings=True is invalid for conversion: iGPT's head scores "
            "vocab_size - 1 ids (untied)"
        )
    return IGPTConfig(
        **gpt2_style_fields(hf_config, "iGPT"),
        norm="rmsnorm",
        attention=attention,
        fused_qkv=fused_qkv,
        tie_output=False,
        head=head,
        num_labels=int(getattr(hf_config, "num_labels", 2) or 2),
    )


def _hf_head(hf_model: Any) -> str:
    common.require_transformers()
    name = type(hf_model).__name__
    if name not in _HEADS:
        raise ValueError(f"hf_model={name} is invalid: expected a transformers {', '.join(_HEADS)}")
    return _HEADS[name]


def imagegpt_from_hf(hf_model: Any, *, fused_qkv: bool = True, attention: str = "sdpa") -> IGPT:
    """A tfam iGPT computing what ``hf_model`` computes, with copies of its weights.

    ``ImageGPTForCausalImageModeling``: ``model(ids)`` equals ``hf_model(ids).logits`` (head
    "lm"); ``ImageGPTForImageClassification``: the class logits (head "sequence");
    ``ImageGPTModel``: ``last_hidden_state`` (head "none"). The result is in ``hf_model``'s
    train/eval mode, dtype and device."""
    head = _hf_head(hf_model)
    base = hf_model if head == "none" else hf_model.transformer
    config = config_from_hf(hf_model.config, head, fused_qkv=fused_qkv, attention=attention)
    hf_state = {k: v for k, v in base.state_dict().items() if not _MASK_BUFFER.search(k)}
    if head in _HEAD_WEIGHTS:
        name = _HEAD_WEIGHTS[head]
        hf_state[name] = dict(hf_model.named_parameters())[name]
    state: dict[str, Tensor] = {}
    used: set[str] = set()
    for hf_name, tfam_names, transposed in weight_pairs(config):
        if hf_name not in hf_state:
            raise ValueError(f"hf_model has no weight {hf_name!r}; cannot convert it")
        value = hf_state[hf_name].detach()
        value = value.t() if transposed else value
        for name, part in zip(tfam_names, value.chunk(len(tfam_names), dim=0), strict=True):
            state[name] = part.contiguous().clone()  # copies: no storage shared with HF
        used.add(hf_name)
    common.refuse_unused_weights(set(hf_state) - used, "iGPT")
    # Built on the meta device: no random init to pay for or to draw from the caller's RNG.
    with torch.device("meta"):
        model = IGPT(config)
    missing, _ = model.load_state_dict(state, strict=False, assign=True)
    if missing:
        raise ValueError(f"hf_model lacks weights tfam's iGPT needs: {sorted(missing)[:5]}")
    return model.train(hf_model.training)


def config_to_hf(model: IGPT, *, attn_implementation: str | None = None) -> Any:
    """The transformers ImageGPTConfig for a tfam iGPT; refuses what ImageGPT cannot express."""
    transformers = common.require_transformers()
    c = model.config
    target = "Hugging Face ImageGPT"
    refuse = common.refusal(target)
    if c.position != "learned":
        raise refuse("position", c.position, "ImageGPT always adds a learned position table")
    if not c.qkv_bias:
        raise refuse("qkv_bias", c.qkv_bias, "ImageGPT's c_attn always has a bias")
    if c.norm != "rmsnorm":
        raise refuse("norm", c.norm, "ImageGPT's norm does not subtract the mean (rmsnorm)")
    if not c.norm_first:
        raise refuse("norm_first", c.norm_first, "ImageGPT blocks are pre-norm")
    if not c.final_norm:
        raise refuse("final_norm", c.final_norm, "ImageGPT always applies a final norm")
    if c.activation not in common.TFAM_TO_HF_ACT:
        raise refuse(
            "activation",
            c.activation,
            "ImageGPT's MLP is not gated; convertible: "
            + ", ".join(map(repr, common.TFAM_TO_HF_ACT)),
        )
    common.refuse_inexact_attention(c.attention, target, c.attention_options)
    common.warn_drop_path_dropped(c.drop_path, "ImageGPT")
    return transformers.ImageGPTConfig(
        vocab_size=c.vocab_size,
        n_positions=c.max_positions,
        n_embd=c.dim,
        n_layer=c.depth,
        n_head=c.heads,
        n_inner=c.ffn_dim,
        activation_function=common.TFAM_TO_HF_ACT[c.activation],
        resid_pdrop=c.dropout,
        embd_pdrop=c.dropout,
        attn_pdrop=c.attn_dropout,
        layer_norm_epsilon=c.norm_eps,
        initializer_range=c.init_std,
        num_labels=c.num_labels,
        tie_word_embeddings=False,
        # ImageGPT has only its own (eager) attention: every exact tfam kernel computes it.
        attn_implementation=attn_implementation or "eager",
    )


def imagegpt_to_hf(model: IGPT, *, attn_implementation: str | None = None) -> PreTrainedModel:
    """The Hugging Face model computing what the tfam iGPT computes, with copies of its
    weights: ``ImageGPTForCausalImageModeling`` (head "lm"), ``ImageGPTForImageClassification``
    ("sequence") or ``ImageGPTModel`` ("none").

    Refused (``ValueError``): positions other than learned, LayerNorm, post-norm blocks, no
    final norm, no Q/K/V bias, gated MLPs, approximate attention kernels.
    """
    if not isinstance(model, IGPT):
        raise ValueError(f"model={type(model).__name__} is invalid: expected a tfam iGPT")
    transformers = common.require_transformers()
    hf_config = config_to_hf(model, attn_implementation=attn_implementation)
    head = model.config.head
    cls_name = next(name for name, h in _HEADS.items() if h == head)
    hf_class = getattr(transformers, cls_name)
    hf = common.build_hf_model(lambda: hf_class(hf_config), model)
    prefix = "" if head == "none" else "transformer."
    tfam_state = model.state_dict()
    state: dict[str, Tensor] = {}
    for hf_name, tfam_names, transposed in weight_pairs(model.config):
        value = torch.cat([tfam_state[n].detach() for n in tfam_names], dim=0)
        value = value.t() if transposed else value
        key = hf_name if hf_name in _HEAD_WEIGHTS.values() else f"{prefix}{hf_name}"
        state[key] = value.contiguous()
    missing, unexpected = hf.load_state_dict(state, strict=False)  # copies into HF's tensors
    missing = [k for k in missing if not _MASK_BUFFER.search(k)]
    if missing or unexpected:
        raise ValueError(
            f"the Hugging Face model's weights do not match: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}"
        )
    return hf.train(model.training)


def compare(tfam_model: IGPT, hf_model: Any) -> float:
    """Max |difference| of the outputs (logits, class logits or last hidden states) of a tfam
    iGPT and its HF counterpart on 2 rows of [start] + 6 random pixel ids."""
    c = tfam_model.config
    ids = common.random_ids(c.vocab_size - 1, min(7, c.max_positions))
    ids[:, 0] = c.start_token_id
    out = hf_model(input_ids=ids)
    theirs = out.last_hidden_state if c.head == "none" else out.logits
    return (tfam_model(ids) - theirs).abs().max().item()


register_converter(
    Converter(
        model_type="imagegpt",
        family=IGPT,
        hf_classes=tuple(_HEADS),
        from_hf=imagegpt_from_hf,
        to_hf=imagegpt_to_hf,
        compare=compare,
    )
)

__all__ = [
    "compare",
    "config_from_hf",
    "config_to_hf",
    "imagegpt_from_hf",
    "imagegpt_to_hf",
    "weight_pairs",
]
