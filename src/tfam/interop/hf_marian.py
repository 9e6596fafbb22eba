"""Hugging Face MarianMT <-> tfam encoder–decoder Transformer: configs, weights, and what cannot
cross.

``marian_from_hf(hf_model)`` turns a transformers ``MarianMTModel`` into a tfam
:class:`~tfam.models.transformer.Transformer` with the same logits; ``marian_to_hf(model)``
goes back. Both copy every weight (no shared storage) and refuse, with a ``ValueError`` naming
the setting, what the other side would compute differently.

Marian is the Transformer of the paper with post-norm blocks, no final norm, Q/K/V biases,
LayerNorm eps 1e-5, sinusoids added to the (optionally sqrt(D)-scaled) token embeddings, and a
fixed bias on the logits. Two layouts differ from tfam's defaults and are config fields there:
Marian's sinusoid table holds every sine first, then every cosine (``sinusoid_layout="halves"``,
:func:`~tfam.layers.position.sinusoidal_table_halves`), and ``final_logits_bias`` is a buffer
(``logits_bias=True``; not trained on either side). ``marian_to_hf`` also takes tfam's own
interleaved layout (a ``transformer_base`` run, say) by reordering the residual features so
that its table becomes Marian's; ``marian_from_hf`` always gives the halves layout.

=============================================  ==============================================
HF (MarianMTModel)                             tfam
=============================================  ==============================================
model.shared (or encoder.embed_tokens)         src_embed.tokens (tgt_embed.tokens when shared)
model.decoder.embed_tokens (unshared)          tgt_embed.tokens
model.{en,de}coder.embed_positions (fixed)     {src,tgt}_embed.position.table (computed, checked)
*.layers.i.self_attn.q/k/v_proj                {en,de}coder.blocks.i.mhsa.qkv rows [q; k; v]
                                               (or mhsa.q_proj, k_proj, v_proj unfused)
*.layers.i.self_attn.out_proj                  *.blocks.i.mhsa.out_proj
*.layers.i.self_attn_layer_norm                *.blocks.i.norm1
decoder.layers.i.encoder_attn (+ _layer_norm)  decoder.blocks.i.cross_attn (+ norm_cross)
*.layers.i.fc1 / fc2 / final_layer_norm        *.blocks.i.mlp.fc1 / mlp.fc2 / norm2
lm_head (tied unless tie_word_embeddings=0)    lm_head (tied to tgt_embed.tokens: tie_output)
final_logits_bias (1, V) buffer                logits_bias (V,) buffer
=============================================  ==============================================

Special ids: Marian starts decoding with ``decoder_start_token_id`` (its pad id in the released
checkpoints); tfam's decoder starts with ``bos_token_id``, so the two are the same field. When
it equals the pad id, tfam's default target mask keeps the first position visible (see
:meth:`~tfam.models.transformer.Transformer.decode`). Hugging Face's ``nn.Embedding`` keeps the
pad row out of the gradient (``padding_idx``); tfam's embeddings do not (outputs are the same,
training differs slightly).

Decoding: greedy tokens equal ``generate``'s. Beam search ranks finished hypotheses by
``log p / ((5 + |Y|) / 6)^alpha`` (GNMT, as the Transformer paper) where Hugging Face divides
by ``|Y|^alpha`` and stops on a heuristic; with ``length_penalty=0`` both are plain
log-probability and the tokens agree. ``forced_eos_token_id`` (a logits processor of
``generate``, set in the released Marian configs) has no tfam counterpart: ``marian_to_hf``
writes None, and ``marian_from_hf`` leaves it behind, as every setting of a checkpoint's
``generation_config.json`` (``bad_words_ids``, ``num_beams``, ``max_length``): pass them to
``generate``. tfam also keeps a finished hypothesis whose EOS ranks below the k best candidates
of a step (Hugging Face drops it); at ``length_penalty=0`` such a hypothesis never wins. And
Hugging Face's beam search fills finished rows with ``pad_token_id or eos_token_id``, so with
a pad id of 0 it writes EOS after EOS where tfam writes the pad id.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

import tfam.interop.common as common
from tfam.interop.common import (
    HF_TO_TFAM_ACT,
    TFAM_TO_HF_ACT,
    TFAM_TO_HF_ATTN,
    build_hf_model,
    refuse_inexact_attention,
    require_transformers,
    warn_drop_path_dropped,
)
from tfam.interop.registry import Converter, register_converter
from tfam.layers.position import sinusoidal_table_halves
from tfam.models.transformer import Transformer, TransformerConfig

if TYPE_CHECKING:  # transformers is optional: imported only when a conversion runs
    from transformers import PreTrainedModel

# Marian's LayerNorms are nn.LayerNorm(d_model): torch's default eps, not a config field.
MARIAN_NORM_EPS = 1e-5
# Largest |difference| accepted between an HF position table and Marian's sinusoids (float32
# rounding of the same float64 values; HF recomputes the table on load, it is never saved).
_TABLE_ATOL = 1e-6
_POSITION_KEYS = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")


def _attention_pairs(hf: str, tf: str, fused: bool) -> list[tuple[list[str], str]]:
    """(HF names, tfam name) of one attention; several HF names are concatenated on dim 0."""
    pairs: list[tuple[list[str], str]] = []
    for suffix in ("weight", "bias"):
        names = [f"{hf}.{p}_proj.{suffix}" for p in "qkv"]
        if fused:
            pairs.append((names, f"{tf}.qkv.{suffix}"))
        else:
            pairs += [([n], f"{tf}.{p}_proj.{suffix}") for p, n in zip("qkv", names, strict=True)]
        pairs.append(([f"{hf}.out_proj.{suffix}"], f"{tf}.out_proj.{suffix}"))
    return pairs


def _block_pairs(side: str, i: int, fused: bool) -> list[tuple[list[str], str]]:
    hf, tf = f"model.{side}.layers.{i}", f"{side}.blocks.{i}"
    pairs = _attention_pairs(f"{hf}.self_attn", f"{tf}.mhsa", fused)
    norms = [("self_attn_layer_norm", "norm1"), ("final_layer_norm", "norm2")]
    if side == "decoder":
        pairs += _attention_pairs(f"{hf}.encoder_attn", f"{tf}.cross_attn", fused)
        norms.append(("encoder_attn_layer_norm", "norm_cross"))
    for suffix in ("weight", "bias"):
        pairs += [([f"{hf}.{h}.{suffix}"], f"{tf}.{t}.{suffix}") for h, t in norms]
        pairs += [([f"{hf}.fc{j}.{suffix}"], f"{tf}.mlp.fc{j}.{suffix}") for j in (1, 2)]
    return pairs


def weight_pairs(config: TransformerConfig) -> list[tuple[list[str], str]]:
    """Every (HF names on a ``MarianMTModel``, tfam name) of a config. A tied weight is listed
    once, by its first name on each side; ``final_logits_bias`` (1, V) pairs with
    ``logits_bias`` (V,) when the config has it."""
    pairs = [(["model.encoder.embed_tokens.weight"], "src_embed.tokens.weight")]
    if not config.share_embeddings:
        pairs.append((["model.decoder.embed_tokens.weight"], "tgt_embed.tokens.weight"))
    for i in range(config.depth):
        pairs += _block_pairs("encoder", i, config.fused_qkv)
    for i in range(config.decoder_depth or 0):
        pairs += _block_pairs("decoder", i, config.fused_qkv)
    if not config.tie_output:
        pairs.append((["lm_head.weight"], "lm_head.weight"))
    if config.logits_bias:
        pairs.append((["final_logits_bias"], "logits_bias"))
    return pairs


def _aliases(config: TransformerConfig) -> dict[str, str]:
    """HF state-dict names of tied weights that :func:`weight_pairs` does not list -> the tfam
    name they hold (HF lists every name of a tied tensor). ``model.shared`` is never read by
    Marian's forward: it is the encoder's and decoder's embedding when they are shared, and
    a dead copy otherwise (transformers 5.x unties all three without tie_word_embeddings)."""
    names = {}
    if config.share_embeddings:
        names["model.shared.weight"] = "src_embed.tokens.weight"
        names["model.decoder.embed_tokens.weight"] = "src_embed.tokens.weight"
    if config.tie_output:
        names["lm_head.weight"] = "tgt_embed.tokens.weight"
    return names


def _refuse(name: str, value: Any, why: str) -> ValueError:
    return ValueError(f"{name}={value!r} is invalid for conversion: {why}")


def _single_id(hf_config: Any, name: str) -> int:
    value = getattr(hf_config, name, None)
    if isinstance(value, list | tuple):
        if len(value) != 1:
            raise _refuse(name, value, "tfam's Transformer takes one id")
        value = value[0]
    if not isinstance(value, int):
        raise _refuse(name, value, "tfam's Transformer needs an int id")
    return value


def config_from_hf(
    hf_config: Any,
    *,
    share_embeddings: bool | None = None,
    tie_output: bool | None = None,
    fused_qkv: bool = True,
    attention: str = "sdpa",
) -> TransformerConfig:
    """tfam TransformerConfig for an HF MarianConfig; refuses settings tfam computes
    differently. ``share_embeddings`` / ``tie_output`` default to the config's
    ``share_encoder_decoder_embeddings`` / ``tie_word_embeddings``."""
    c = hf_config
    act = c.activation_function
    if act not in HF_TO_TFAM_ACT:
        raise _refuse(
            "activation_function",
            act,
            f"tfam has exact counterparts for {', '.join(map(repr, HF_TO_TFAM_ACT))}",
        )
    pairs = [
        ("decoder_attention_heads", "encoder_attention_heads", "heads"),
        ("decoder_ffn_dim", "encoder_ffn_dim", "ffn_dim"),
        ("decoder_vocab_size", "vocab_size", "vocab_size"),
    ]
    for name, other, field in pairs:
        value, expected = getattr(c, name), getattr(c, other)
        if value is not None and value != expected:
            raise _refuse(
                name, value, f"tfam's Transformer has one {field} (here {other}={expected})"
            )
    if c.pad_token_id is None:
        raise _refuse("pad_token_id", None, "Marian masks and pads with a pad id; set one")
    for name in ("activation_dropout", "encoder_layerdrop", "decoder_layerdrop"):
        rate = float(getattr(c, name, 0.0) or 0.0)
        if rate:
            warnings.warn(
                f"{name}={rate} is dropped: tfam's Transformer has no such dropout (eval "
                "outputs are unchanged; training differs)",
                stacklevel=3,
            )
    share = (
        bool(c.share_encoder_decoder_embeddings) if share_embeddings is None else share_embeddings
    )
    tie = bool(c.tie_word_embeddings) if tie_output is None else tie_output
    return TransformerConfig(
        dim=c.d_model,
        depth=c.encoder_layers,
        decoder_depth=c.decoder_layers,
        heads=c.encoder_attention_heads,
        ffn_dim=c.encoder_ffn_dim,
        activation=HF_TO_TFAM_ACT[act],
        norm="layernorm",
        norm_eps=MARIAN_NORM_EPS,
        norm_first=False,
        final_norm=False,
        dropout=float(c.dropout),
        attn_dropout=float(c.attention_dropout),
        attention=attention,
        position="sinusoidal",
        sinusoid_layout="halves",
        qkv_bias=True,
        fused_qkv=fused_qkv,
        init_std=float(c.init_std),
        vocab_size=c.vocab_size,
        max_positions=c.max_position_embeddings,
        pad_token_id=_single_id(c, "pad_token_id"),
        bos_token_id=_single_id(c, "decoder_start_token_id"),
        eos_token_id=_single_id(c, "eos_token_id"),
        share_embeddings=share,
        tie_output=tie,
        scale_embeddings=bool(c.scale_embedding),
        logits_bias=True,
    )


def _check_positions(hf_state: dict[str, Tensor], config: TransformerConfig) -> None:
    """Marian's position tables are fixed sinusoids that tfam computes itself: refuse a model
    whose tables hold anything else (tfam could not represent them)."""
    table = sinusoidal_table_halves(config.max_positions, config.dim)
    for key in _POSITION_KEYS:
        if key not in hf_state:
            raise ValueError(f"hf_model has no weight {key!r}; cannot convert it")
        value = hf_state[key].detach()
        # A half-precision table is the float32 one rounded: allow that rounding.
        atol = max(_TABLE_ATOL, torch.finfo(value.dtype).eps)
        value = value.to("cpu", torch.float32)
        if value.shape != table.shape or not torch.allclose(value, table, rtol=0, atol=atol):
            raise ValueError(
                f"hf_model's {key} is not Marian's sinusoid table (max_position_embeddings="
                f"{config.max_positions}, d_model={config.dim}); tfam computes that table and "
                "cannot hold another"
            )


def marian_from_hf(
    hf_model: Any, *, fused_qkv: bool = True, attention: str = "sdpa"
) -> Transformer:
    """A tfam Transformer computing what ``hf_model`` (a ``MarianMTModel``) computes, with
    copies of its weights: ``model(src_ids, tgt_ids, src_mask, tgt_mask)`` equals
    ``hf_model(input_ids, attention_mask, decoder_input_ids, decoder_attention_mask).logits``
    (B, Lt, V). The result is in ``hf_model``'s train/eval mode, dtype and device."""
    transformers = require_transformers()
    if not isinstance(hf_model, transformers.MarianMTModel):
        raise ValueError(
            f"hf_model={type(hf_model).__name__} is invalid: expected a transformers "
            "MarianMTModel (MarianModel and MarianForCausalLM have no tfam counterpart)"
        )
    sharing = _sharing(hf_model)
    config = config_from_hf(hf_model.config, **sharing, fused_qkv=fused_qkv, attention=attention)
    hf_state = dict(hf_model.state_dict())
    _check_positions(hf_state, config)
    state, used = common.gather_weights(hf_state, weight_pairs(config))
    if "logits_bias" in state:
        state["logits_bias"] = state["logits_bias"].reshape(-1)  # HF's is (1, V)
    used |= set(_POSITION_KEYS) | set(_aliases(config)) | {"model.shared.weight"}
    common.refuse_unused_weights(set(hf_state) - used, "Transformer")
    # Built on the meta device: no random init to pay for or to draw from the caller's RNG.
    with torch.device("meta"):
        model = Transformer(config)
    missing_keys, unexpected = model.load_state_dict(state, strict=False, assign=True)
    tied_keys = {"tgt_embed.tokens.weight"} if config.share_embeddings else set()
    tied_keys |= {"lm_head.weight"} if config.tie_output else set()
    if set(missing_keys) - tied_keys or unexpected:
        raise ValueError(
            f"the tfam model's weights do not match: missing {sorted(missing_keys)[:5]}, "
            f"unexpected {unexpected[:5]}"
        )
    # assign=True replaced the tied tensors; tie them again.
    if config.share_embeddings:
        model.tgt_embed.tokens = model.src_embed.tokens
    if config.tie_output:
        model.lm_head.weight = model.tgt_embed.tokens.weight
    # The position tables are non-persistent buffers, still on the meta device: compute them.
    like = state["src_embed.tokens.weight"]
    table = sinusoidal_table_halves(config.max_positions, config.dim)
    for embed in (model.src_embed, model.tgt_embed):
        embed.position.table = table.to(device=like.device, dtype=like.dtype)
    return model.train(hf_model.training)


def _sharing(hf_model: Any) -> dict[str, bool]:
    """Which of a MarianMTModel's embeddings are one tensor, as config_from_hf's flags:
    ``share_embeddings`` (encoder and decoder tokens), ``tie_output`` (decoder tokens and LM
    head)."""
    decoder_tokens = hf_model.model.decoder.embed_tokens.weight
    return {
        "share_embeddings": hf_model.model.encoder.embed_tokens.weight is decoder_tokens,
        "tie_output": hf_model.lm_head.weight is decoder_tokens,
    }


def config_to_hf(model: Transformer, *, attn_implementation: str | None = None) -> Any:
    """The transformers MarianConfig for a tfam Transformer; refuses what Marian cannot
    express."""
    transformers = require_transformers()
    c = model.config
    target = "Hugging Face MarianMT"
    refuse = common.refusal(target)
    if c.position != "sinusoidal":
        raise refuse("position", c.position, "Marian adds fixed sinusoids")
    common.refuse_unlike_blocks(
        c, target, "Marian", norm_first=False, final_norm=False, norm_eps=MARIAN_NORM_EPS
    )
    if not c.qkv_bias:
        raise refuse("qkv_bias", c.qkv_bias, "Marian's Q, K, V projections always have biases")
    refuse_inexact_attention(c.attention, "Hugging Face MarianMT", c.attention_options)
    warn_drop_path_dropped(c.drop_path, "MarianMT")
    return transformers.MarianConfig(
        vocab_size=c.vocab_size,
        decoder_vocab_size=c.vocab_size,
        max_position_embeddings=c.max_positions,
        encoder_layers=c.depth,
        decoder_layers=c.decoder_depth,
        encoder_ffn_dim=c.ffn_dim,
        decoder_ffn_dim=c.ffn_dim,
        encoder_attention_heads=c.heads,
        decoder_attention_heads=c.heads,
        d_model=c.dim,
        activation_function=TFAM_TO_HF_ACT[c.activation],
        dropout=c.dropout,
        attention_dropout=c.attn_dropout,
        activation_dropout=0.0,
        init_std=c.init_std,
        scale_embedding=c.scale_embeddings,
        pad_token_id=c.pad_token_id,
        eos_token_id=c.eos_token_id,
        decoder_start_token_id=c.bos_token_id,
        forced_eos_token_id=None,
        share_encoder_decoder_embeddings=c.share_embeddings,
        tie_word_embeddings=c.tie_output,
        attn_implementation=attn_implementation or TFAM_TO_HF_ATTN[c.attention],
    )


# tfam weights with a residual-stream (D) axis: name suffix -> that axis.
_RESIDUAL_AXES = [
    ("tokens.weight", 1),
    ("lm_head.weight", 1),
    ("qkv.weight", 1),
    ("q_proj.weight", 1),
    ("k_proj.weight", 1),
    ("v_proj.weight", 1),
    ("out_proj.weight", 0),
    ("out_proj.bias", 0),
    ("fc1.weight", 1),
    ("fc2.weight", 0),
    ("fc2.bias", 0),
]


def _to_halves_basis(state: dict[str, Tensor], dim: int) -> dict[str, Tensor]:
    """The weights of the same function with the D residual features reordered (even ones,
    then odd ones): tfam's interleaved table [sin f0, cos f0, sin f1, ...] becomes Marian's
    [sin f0, sin f1, ..., cos f0, cos f1, ...]. Embeddings, the LM head and every projection
    reading the stream permute their input columns, every projection writing to it its output
    rows, and LayerNorm its gain and bias (its mean and variance ignore the order)."""
    perm = torch.cat([torch.arange(0, dim, 2), torch.arange(1, dim, 2)])
    out = {}
    for name, value in state.items():
        axis = next((a for suffix, a in _RESIDUAL_AXES if name.endswith(suffix)), None)
        if axis is None and ".norm" in name:
            axis = 0
        out[name] = value if axis is None else value.index_select(axis, perm.to(value.device))
    return out


def marian_to_hf(model: Transformer, *, attn_implementation: str | None = None) -> PreTrainedModel:
    """The ``MarianMTModel`` computing what the tfam Transformer computes, with copies of its
    weights (its logits equal ``model(src_ids, tgt_ids, src_mask, tgt_mask)``), on the model's
    device and dtype, in its train/eval mode. ``attn_implementation`` defaults to 'eager' for
    tfam's 'math' kernel and 'sdpa' otherwise. A model without ``logits_bias`` gets a zero
    ``final_logits_bias``.

    tfam's own (interleaved) sinusoid layout converts too: the features of the residual stream
    are permuted (evens, then odds) so that its table becomes Marian's, which changes no output
    (LayerNorm, attention and the MLP do not depend on the order of those features).

    Refused (``ValueError``): learned positions, RMSNorm, a LayerNorm eps other than 1e-5, pre-norm blocks, a final norm, no Q/K/V bias, gated MLPs,
    attention kernels without an exact HF counterpart.
    """
    if not isinstance(model, Transformer):
        raise ValueError(f"model={type(model).__name__} is invalid: expected a tfam Transformer")
    transformers = require_transformers()
    c = model.config
    hf_config = config_to_hf(model, attn_implementation=attn_implementation)
    hf = build_hf_model(lambda: transformers.MarianMTModel(hf_config), model)
    tfam_state = model.state_dict()
    if c.sinusoid_layout == "interleaved":
        tfam_state = _to_halves_basis(tfam_state, c.dim)
    state: dict[str, Tensor] = {}
    for hf_names, tfam_name in weight_pairs(c):
        value = tfam_state[tfam_name].detach()
        if tfam_name == "logits_bias":
            state["final_logits_bias"] = value.reshape(1, -1)
            continue
        for name, part in zip(hf_names, value.chunk(len(hf_names), dim=0), strict=True):
            state[name] = part
    if not c.logits_bias:
        state["final_logits_bias"] = tfam_state["lm_head.weight"].new_zeros(1, c.vocab_size)
    # Every name of a tied weight is written: HF may or may not have tied it (see _aliases).
    for hf_name, tfam_name in _aliases(c).items():
        state[hf_name] = tfam_state[tfam_name].detach()
    missing, unexpected = hf.load_state_dict(state, strict=False)  # copies into HF's tensors
    missing = [k for k in missing if k not in _POSITION_KEYS]  # HF computes those tables
    if missing or unexpected:
        raise ValueError(
            f"the Hugging Face model's weights do not match: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}"
        )
    _check_positions(dict(hf.state_dict()), c)  # HF computed its own tables: the same ones
    base = hf.model
    if (
        c.share_embeddings
        and base.encoder.embed_tokens.weight is not base.decoder.embed_tokens.weight
    ):
        warnings.warn(
            "share_embeddings=True with tie_output=False: the installed transformers does not "
            "tie MarianMT's encoder and decoder embeddings without tie_word_embeddings, so they "
            "start equal but are two matrices (outputs are unchanged; training differs)",
            stacklevel=2,
        )
    return hf.train(model.training)


def compare(tfam_model: Transformer, hf_model: Any) -> float:
    """Max |difference| of the logits of a tfam Transformer and its MarianMT counterpart on 2
    source rows of 7 random ids and 2 target rows of 5 (the start token, then random ids), the
    second row of each ending in padding."""
    c = tfam_model.config
    src = common.random_ids(c.vocab_size, min(7, c.max_positions))
    tgt = common.random_ids(c.vocab_size, min(5, c.max_positions))
    tgt[:, 0] = c.bos_token_id
    src_mask = torch.ones_like(src, dtype=torch.bool)
    tgt_mask = torch.ones_like(tgt, dtype=torch.bool)
    src_mask[1, max(1, src.shape[1] - 3) :] = False
    tgt_mask[1, max(1, tgt.shape[1] - 2) :] = False
    src[~src_mask], tgt[~tgt_mask] = c.pad_token_id, c.pad_token_id
    ours = tfam_model(src, tgt, src_mask, tgt_mask)
    theirs = hf_model(
        input_ids=src,
        attention_mask=src_mask.long(),
        decoder_input_ids=tgt,
        decoder_attention_mask=tgt_mask.long(),
    ).logits
    return (ours - theirs).abs().max().item()


register_converter(
    Converter(
        model_type="marian",
        family=Transformer,
        hf_classes=("MarianMTModel",),
        from_hf=marian_from_hf,
        to_hf=marian_to_hf,
        compare=compare,
        sample="2 rows of random source and target ids, with padding",
    )
)

__all__ = [
    "compare",
    "config_from_hf",
    "config_to_hf",
    "marian_from_hf",
    "marian_to_hf",
    "weight_pairs",
]
