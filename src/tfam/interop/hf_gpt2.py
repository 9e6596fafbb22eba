"""Hugging Face GPT-2 <-> tfam GPT: configs, weights, and what cannot cross.

``gpt2_from_hf(hf_model)`` turns a transformers ``GPT2LMHeadModel`` or ``GPT2Model`` into a
tfam :class:`~tfam.models.gpt.GPT` with the same outputs; ``gpt2_to_hf(model)`` gives back a
``GPT2LMHeadModel``. Both copy every weight (no shared storage) and refuse, with a
``ValueError`` naming the setting, what the other side would compute differently.

GPT-2's projections are ``Conv1D`` layers, which store their weight as (in, out): the
transpose of ``nn.Linear``'s (out, in). ``c_attn`` is the fused Q, K, V projection with
columns [q | k | v]; transposed, its rows are tfam's fused ``qkv`` rows [W_Q; W_K; W_V].

=======================================  =====================================================
HF (``transformer.`` prefix on the LM)   tfam
=======================================  =====================================================
wte / wpe                                tok_embed.weight / pos_embed
h.i.ln_1 / ln_2                          stack.blocks.i.norm1 / norm2
h.i.attn.c_attn (Conv1D, D -> 3D)        stack.blocks.i.mhsa.qkv (transposed; or q/k/v_proj)
h.i.attn.c_proj (Conv1D)                 stack.blocks.i.mhsa.out_proj (transposed)
h.i.mlp.c_fc / c_proj (Conv1D)           stack.blocks.i.mlp.fc1 / fc2 (transposed)
ln_f                                     norm
lm_head (GPT2LMHeadModel)                lm_head (tied to wte unless tie_word_embeddings=False)
=======================================  =====================================================

A ``GPT2Model`` has no LM head: its tfam model's head is the tied token embedding, and
``model.forward_features(ids, mask)`` equals ``last_hidden_state``. ``embd_pdrop`` and
``resid_pdrop`` become tfam's one ``dropout`` (a warning if they differ: eval outputs are the
same, training is not).
"""

from __future__ import annotations

import re
import warnings
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

import tfam.interop.common as common
from tfam.interop.registry import Converter, register_converter
from tfam.models.gpt import GPT, GPTConfig

if TYPE_CHECKING:  # transformers is optional: imported only when a conversion runs
    from transformers import PreTrainedModel

# Causal-mask buffers some transformers releases keep in the state dict (not weights).
_MASK_BUFFER = re.compile(r"(^|\.)h\.\d+\.attn\.(bias|masked_bias)$")


def _block_pairs(i: int, fused: bool) -> list[tuple[str, list[str], bool]]:
    """(HF name, tfam names, transposed) for block i: one HF tensor may fill several tfam
    tensors (c_attn -> q, k, v unfused), split along tfam's dim 0."""
    hf, tf = f"h.{i}.", f"stack.blocks.{i}."
    pairs: list[tuple[str, list[str], bool]] = []
    for suffix in ("weight", "bias"):
        conv = suffix == "weight"  # Conv1D weights are (in, out): transposed
        pairs.append((f"{hf}ln_1.{suffix}", [f"{tf}norm1.{suffix}"], False))
        pairs.append((f"{hf}ln_2.{suffix}", [f"{tf}norm2.{suffix}"], False))
        qkv = (
            [f"{tf}mhsa.qkv.{suffix}"] if fused else [f"{tf}mhsa.{p}_proj.{suffix}" for p in "qkv"]
        )
        pairs.append((f"{hf}attn.c_attn.{suffix}", qkv, conv))
        pairs.append((f"{hf}attn.c_proj.{suffix}", [f"{tf}mhsa.out_proj.{suffix}"], conv))
        pairs.append((f"{hf}mlp.c_fc.{suffix}", [f"{tf}mlp.fc1.{suffix}"], conv))
        pairs.append((f"{hf}mlp.c_proj.{suffix}", [f"{tf}mlp.fc2.{suffix}"], conv))
    return pairs


def weight_pairs(config: GPTConfig) -> list[tuple[str, list[str], bool]]:
    """Every (HF name without the ``transformer.`` prefix, tfam names, transposed) of a
    config; ``lm_head.weight`` is listed only for an untied head."""
    pairs: list[tuple[str, list[str], bool]] = [
        ("wte.weight", ["tok_embed.weight"], False),
        ("wpe.weight", ["pos_embed"], False),
    ]
    for i in range(config.depth):
        pairs += _block_pairs(i, config.fused_qkv)
    pairs += [("ln_f.weight", ["norm.weight"], False), ("ln_f.bias", ["norm.bias"], False)]
    if not config.tie_output:
        pairs.append(("lm_head.weight", ["lm_head.weight"], False))
    return pairs


def gpt2_style_fields(hf_config: Any, title: str) -> dict[str, Any]:
    """The config fields of a GPT-2-style HF config (GPT2Config, ImageGPTConfig: n_embd,
    n_layer, n_head, n_inner, the *_pdrop rates, learned positions, a fused biased Q|K|V),
    after refusing the settings tfam computes differently; ``title`` names the family in the
    refusals."""

    def refuse(name: str, value: Any, why: str) -> ValueError:
        return ValueError(f"{name}={value!r} is invalid for conversion: {why}")

    activation = common.activation_from_hf(hf_config.activation_function, "activation_function")
    if not getattr(hf_config, "scale_attn_weights", True):
        raise refuse("scale_attn_weights", False, "tfam always scales scores by 1/sqrt(Dh)")
    if getattr(hf_config, "scale_attn_by_inverse_layer_idx", False):
        raise refuse(
            "scale_attn_by_inverse_layer_idx", True, "tfam's scores have no per-layer scale"
        )
    if getattr(hf_config, "add_cross_attention", False):
        raise refuse("add_cross_attention", True, f"tfam's {title} is decoder-only")
    embd, resid = float(hf_config.embd_pdrop), float(hf_config.resid_pdrop)
    if embd != resid:
        warnings.warn(
            f"embd_pdrop={embd} and resid_pdrop={resid} become one dropout={resid} in tfam "
            "(eval outputs are unchanged; training differs)",
            stacklevel=4,
        )
    return dict(
        dim=hf_config.n_embd,
        depth=hf_config.n_layer,
        heads=hf_config.n_head,
        ffn_dim=hf_config.n_inner or 4 * hf_config.n_embd,
        activation=activation,
        norm_eps=float(hf_config.layer_norm_epsilon),
        norm_first=True,
        dropout=resid,
        attn_dropout=float(hf_config.attn_pdrop),
        position="learned",
        qkv_bias=True,
        init_std=float(hf_config.initializer_range),
        vocab_size=hf_config.vocab_size,
        max_positions=hf_config.n_positions,
        final_norm=True,
    )


def config_from_hf(
    hf_config: Any, *, tie_output: bool = True, fused_qkv: bool = True, attention: str = "sdpa"
) -> GPTConfig:
    """tfam GPTConfig for an HF GPT2Config; refuses settings tfam computes differently."""
    return GPTConfig(
        **gpt2_style_fields(hf_config, "GPT"),
        norm="layernorm",
        attention=attention,
        fused_qkv=fused_qkv,
        pad_token_id=_special(hf_config, "pad_token_id"),
        bos_token_id=_special(hf_config, "bos_token_id"),
        eos_token_id=_special(hf_config, "eos_token_id"),
        tie_output=tie_output,
    )


def _special(hf_config: Any, name: str) -> int | None:
    """An HF special id, or None when unset or outside the vocabulary (HF's GPT2Config keeps
    its 50256 defaults even for a small vocabulary, where they name no token)."""
    value = getattr(hf_config, name, None)
    if isinstance(value, list):
        value = value[0] if value else None
    if isinstance(value, int) and 0 <= value < hf_config.vocab_size:
        return value
    return None


def _hf_kind(hf_model: Any) -> str:
    transformers = common.require_transformers()
    if isinstance(hf_model, transformers.GPT2LMHeadModel):
        return "lm"
    if isinstance(hf_model, transformers.GPT2Model):
        return "model"
    raise ValueError(
        f"hf_model={type(hf_model).__name__} is invalid: expected a transformers "
        "GPT2LMHeadModel or GPT2Model"
    )


def gpt2_from_hf(hf_model: Any, *, fused_qkv: bool = True, attention: str = "sdpa") -> GPT:
    """A tfam GPT computing what ``hf_model`` computes, with copies of its weights.

    ``GPT2LMHeadModel``: ``model(ids, attention_mask)`` equals ``hf_model(...).logits``.
    ``GPT2Model``: ``model.forward_features(ids, attention_mask)`` equals
    ``last_hidden_state`` (the LM head is the tied token embedding). The result is in
    ``hf_model``'s train/eval mode, dtype and device.
    """
    kind = _hf_kind(hf_model)
    base = hf_model.transformer if kind == "lm" else hf_model
    tied = kind == "model" or hf_model.lm_head.weight is base.wte.weight
    config = config_from_hf(
        hf_model.config, tie_output=tied, fused_qkv=fused_qkv, attention=attention
    )
    hf_state = dict(base.state_dict())
    if kind == "lm":
        hf_state["lm_head.weight"] = hf_model.lm_head.weight
    # The causal-mask buffers of older transformers releases ("h.i.attn.bias",
    # "h.i.attn.masked_bias") hold no learned value.
    hf_state = {k: v for k, v in hf_state.items() if not _MASK_BUFFER.search(k)}

    state: dict[str, Tensor] = {}
    used: set[str] = set()
    for hf_name, tfam_names, transposed in weight_pairs(config):
        if hf_name not in hf_state:
            raise ValueError(f"hf_model has no weight {hf_name!r}; cannot convert it")
        value = hf_state[hf_name].detach()
        value = value.t() if transposed else value
        parts = value.chunk(len(tfam_names), dim=0)
        for name, part in zip(tfam_names, parts, strict=True):
            # Copies, never views: the tfam model must not share storage with hf_model.
            state[name] = part.contiguous().clone()
        used.add(hf_name)
    common.refuse_unused_weights(
        set(hf_state) - used - ({"lm_head.weight"} if tied else set()), "GPT"
    )
    # Built on the meta device: no random init to pay for or to draw from the caller's RNG.
    with torch.device("meta"):
        model = GPT(config)
    missing, _ = model.load_state_dict(state, strict=False, assign=True)
    if set(missing) - {"lm_head.weight"}:
        raise ValueError(f"hf_model lacks weights tfam's GPT needs: {sorted(missing)[:5]}")
    if config.tie_output:
        model.lm_head.weight = model.tok_embed.weight  # assign=True replaced the tied tensor
    return model.train(hf_model.training)


def config_to_hf(model: GPT, *, attn_implementation: str | None = None) -> Any:
    """The transformers GPT2Config for a tfam GPT; refuses what GPT-2 cannot express."""
    transformers = common.require_transformers()
    c = model.config

    refuse = common.refusal("Hugging Face GPT-2")
    if c.position != "learned":
        raise refuse("position", c.position, "GPT-2 always adds a learned position table")
    if not c.qkv_bias:
        raise refuse("qkv_bias", c.qkv_bias, "GPT-2's c_attn always has a bias")
    common.refuse_unlike_blocks(c, "Hugging Face GPT-2", "GPT-2", norm_first=True)
    common.refuse_inexact_attention(c.attention, "Hugging Face GPT-2", c.attention_options)
    common.warn_drop_path_dropped(c.drop_path, "GPT-2")
    return transformers.GPT2Config(
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
        bos_token_id=c.bos_token_id,
        eos_token_id=c.eos_token_id,
        pad_token_id=c.pad_token_id,
        tie_word_embeddings=c.tie_output,
        attn_implementation=attn_implementation or common.TFAM_TO_HF_ATTN[c.attention],
    )


def gpt2_to_hf(model: GPT, *, attn_implementation: str | None = None) -> PreTrainedModel:
    """The ``GPT2LMHeadModel`` computing what the tfam GPT computes, with copies of its weights
    (its logits equal ``model(ids, attention_mask)``). ``attn_implementation`` defaults to
    'eager' for tfam's 'math' kernel and 'sdpa' otherwise.

    Refused (``ValueError``): positions other than learned, RMSNorm, post-norm blocks, no final
    norm, no Q/K/V bias, gated MLPs (swiglu, geglu), approximate attention kernels.
    """
    if not isinstance(model, GPT):
        raise ValueError(f"model={type(model).__name__} is invalid: expected a tfam GPT")
    transformers = common.require_transformers()
    hf_config = config_to_hf(model, attn_implementation=attn_implementation)
    hf = common.build_hf_model(lambda: transformers.GPT2LMHeadModel(hf_config), model)
    tfam_state = model.state_dict()
    state: dict[str, Tensor] = {}
    for hf_name, tfam_names, transposed in weight_pairs(model.config):
        value = torch.cat([tfam_state[n].detach() for n in tfam_names], dim=0)
        value = value.t() if transposed else value
        key = hf_name if hf_name.startswith("lm_head.") else f"transformer.{hf_name}"
        state[key] = value.contiguous()
    missing, unexpected = hf.load_state_dict(state, strict=False)  # copies into HF's tensors
    # A tied head is HF's wte itself; causal-mask buffers of older releases are not weights.
    missing = [k for k in missing if k != "lm_head.weight" and not _MASK_BUFFER.search(k)]
    if missing or unexpected:
        raise ValueError(
            f"the Hugging Face model's weights do not match: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}"
        )
    return hf.train(model.training)


def compare(tfam_model: GPT, hf_model: Any) -> float:
    """Max |difference| of the logits (GPT2LMHeadModel) or last hidden states (GPT2Model) of a
    tfam GPT and its HF counterpart on 2 rows of 7 random ids."""
    c = tfam_model.config
    ids = common.random_ids(c.vocab_size, min(7, c.max_positions))
    if hasattr(hf_model, "lm_head"):
        return (tfam_model(ids) - hf_model(input_ids=ids).logits).abs().max().item()
    hidden = hf_model(input_ids=ids).last_hidden_state
    return (tfam_model.forward_features(ids) - hidden).abs().max().item()


register_converter(
    Converter(
        model_type="gpt2",
        family=GPT,
        hf_classes=("GPT2LMHeadModel", "GPT2Model"),
        from_hf=gpt2_from_hf,
        to_hf=gpt2_to_hf,
        compare=compare,
    )
)

__all__ = [
    "compare",
    "config_from_hf",
    "config_to_hf",
    "gpt2_from_hf",
    "gpt2_to_hf",
    "weight_pairs",
]
