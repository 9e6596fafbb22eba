"""Hugging Face ViT <-> tfam ViT: configs, weights, and what cannot cross.

``vit_from_hf(hf_model)`` turns a transformers ``ViTModel`` or ``ViTForImageClassification``
into a tfam :class:`~tfam.models.vit.ViT` with the same outputs; ``vit_to_hf(model)`` goes back.
Both copy every weight (the two models share no storage) and refuse, with a ``ValueError``
naming what is wrong, anything the other side cannot express, rather than convert it into
something that computes a different function.

Correspondence (HF names of transformers 5.x; the 4.x names ``encoder.layer.i.attention.
attention.query`` ... are read and written too):

===============================================  ============================================
HF                                               tfam
===============================================  ============================================
embeddings.cls_token (1, 1, D)                   cls_token
embeddings.position_embeddings (1, 1 + N, D)     pos_embed
embeddings.patch_embeddings.projection (Conv2d)  patch_embed.proj (Conv2d, same kernel/stride)
layers.i.layernorm_before / layernorm_after      encoder.blocks.i.norm1 / norm2
layers.i.attention.q_proj, k_proj, v_proj        encoder.blocks.i.mhsa.qkv, rows [q; k; v]
                                                 (or mhsa.q_proj, k_proj, v_proj unfused)
layers.i.attention.o_proj                        encoder.blocks.i.mhsa.out_proj (W_O)
layers.i.mlp.fc1 / fc2                           encoder.blocks.i.mlp.fc1 / fc2
layernorm                                        norm
pooler.dense (+ tanh), ViTModel only             pre_logits (Linear + Tanh), num_classes=0
classifier, ViTForImageClassification only       head
===============================================  ============================================

Left out on purpose, because no output of the converted model depends on them:

- ``embeddings.mask_token`` of a ``ViTModel(use_mask_token=True)``: it only replaces patches
  when ``bool_masked_pos`` is passed (SimMIM pre-training), which tfam's ViT does not take.
  ``ViTForMaskedImageModeling`` itself is refused: its pixel decoder (a 1x1 conv of
  ``encoder_stride**2 * C`` channels and a PixelShuffle) has no tfam counterpart; convert its
  encoder with ``from_hf(hf_model.vit)``.
- ``encoder_stride`` (used only by that decoder), ``id2label``/``label2id`` (tfam's config has
  no class names; ``vit_to_hf`` takes them as ``id2label``), and the attention implementation
  (tfam picks its kernel with ``attention``).

Position embeddings at other image sizes: tfam resamples its table bicubically on every call
whose grid differs from the trained one (and for non-square grids and non-square patches);
transformers 5.x does the same only with ``interpolate_pos_encoding=True``, for a square
trained grid and an int patch size, with the same ``F.interpolate(size=..., mode='bicubic',
align_corners=False)`` call, so the two agree there (the test measures it). Older
transformers releases copied DINO's code (``scale_factor`` from sizes offset by +0.1), which
lands on slightly different values; only the installed 5.x code was compared.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from tfam.interop.common import (  # noqa: F401  (names hf_vit.py exported before common.py)
    HF_TO_TFAM_ACT,
    INSTALL_HINT,
    TFAM_TO_HF_ACT,
    TFAM_TO_HF_ATTN,
    activation_from_hf,
    build_hf_model,
    encoder_fields_to_hf,
    gather_weights,
    random_images,
    refusal,
    refuse_inexact_attention,
    refuse_unlike_blocks,
    refuse_unused_weights,
    require_transformers,
    warn_drop_path_dropped,
)
from tfam.interop.registry import Converter, register_converter
from tfam.models.vit import ViT, ViTConfig

if TYPE_CHECKING:  # transformers is optional: imported only when a conversion runs
    from transformers import PreTrainedModel

# transformers 4.x layer names -> 5.x (the renames transformers 5.x applies itself when it
# loads an old ViT checkpoint, see its conversion_mapping.py). Keys are handled in the 5.x
# ("canonical") form and translated at the edge, so a 4.x model object converts too.
_LEGACY_RENAMES = [
    (re.compile(r"(^|\.)encoder\.layer\.(\d+)\."), r"\1layers.\2."),
    (re.compile(r"\.attention\.attention\.query\."), ".attention.q_proj."),
    (re.compile(r"\.attention\.attention\.key\."), ".attention.k_proj."),
    (re.compile(r"\.attention\.attention\.value\."), ".attention.v_proj."),
    (re.compile(r"\.attention\.output\.dense\."), ".attention.o_proj."),
    (re.compile(r"\.intermediate\.dense\."), ".mlp.fc1."),
    (re.compile(r"(^|\.)(layers\.\d+)\.output\.dense\."), r"\1\2.mlp.fc2."),
]
_IGNORED_HF_KEYS = {"embeddings.mask_token"}


def canonical_hf_key(key: str) -> str:
    """A ViT state-dict key in transformers 5.x naming, whichever version wrote it."""
    for pattern, repl in _LEGACY_RENAMES:
        key = pattern.sub(repl, key)
    return key


def _split_prefix(key: str) -> tuple[str, str]:
    """'vit.layers.0...' -> ('vit.', 'layers.0...'); the classification wrapper's prefix."""
    return ("vit.", key[4:]) if key.startswith("vit.") else ("", key)


def _block_pairs(i: int, fused: bool, qkv_bias: bool) -> list[tuple[list[str], str]]:
    """(HF names, tfam name) for block i; several HF names are concatenated along dim 0."""
    hf, tf = f"layers.{i}.", f"encoder.blocks.{i}."
    pairs: list[tuple[list[str], str]] = []
    for suffix in ("weight", "bias"):
        pairs.append(([f"{hf}layernorm_before.{suffix}"], f"{tf}norm1.{suffix}"))
        pairs.append(([f"{hf}layernorm_after.{suffix}"], f"{tf}norm2.{suffix}"))
        pairs.append(([f"{hf}attention.o_proj.{suffix}"], f"{tf}mhsa.out_proj.{suffix}"))
        pairs.append(([f"{hf}mlp.fc1.{suffix}"], f"{tf}mlp.fc1.{suffix}"))
        pairs.append(([f"{hf}mlp.fc2.{suffix}"], f"{tf}mlp.fc2.{suffix}"))
        if suffix == "bias" and not qkv_bias:
            continue
        names = [f"{hf}attention.{p}_proj.{suffix}" for p in "qkv"]
        if fused:
            # tfam's fused projection is one (3D, D) matrix whose rows are [W_Q; W_K; W_V].
            pairs.append((names, f"{tf}mhsa.qkv.{suffix}"))
        else:
            for p, name in zip("qkv", names):
                pairs.append(([name], f"{tf}mhsa.{p}_proj.{suffix}"))
    return pairs


def weight_pairs(config: ViTConfig) -> list[tuple[list[str], str]]:
    """Every (HF canonical names without the 'vit.' prefix, tfam name) of a ViT config; the
    HF names of 'pooler.' and 'classifier.' weights are given as they sit on ViTModel and on
    ViTForImageClassification (``classifier`` is outside the ``vit.`` prefix there)."""
    pairs: list[tuple[list[str], str]] = [
        (["embeddings.cls_token"], "cls_token"),
        (["embeddings.position_embeddings"], "pos_embed"),
        (["embeddings.patch_embeddings.projection.weight"], "patch_embed.proj.weight"),
        (["embeddings.patch_embeddings.projection.bias"], "patch_embed.proj.bias"),
    ]
    for i in range(config.depth):
        pairs += _block_pairs(i, config.fused_qkv, config.qkv_bias)
    pairs += [(["layernorm.weight"], "norm.weight"), (["layernorm.bias"], "norm.bias")]
    if config.representation_size:
        pairs += [(["pooler.dense.weight"], "pre_logits.0.weight")]
        pairs += [(["pooler.dense.bias"], "pre_logits.0.bias")]
    if config.num_classes:
        pairs += [(["classifier.weight"], "head.weight"), (["classifier.bias"], "head.bias")]
    return pairs


def _hf_kind(hf_model: Any) -> str:
    """'model' (ViTModel) or 'classification' (ViTForImageClassification); refuse the rest."""
    transformers = require_transformers()
    masked = getattr(transformers, "ViTForMaskedImageModeling", None)
    if masked is not None and isinstance(hf_model, masked):
        raise ValueError(
            "hf_model=ViTForMaskedImageModeling is invalid: tfam has no counterpart of its "
            "SimMIM pixel decoder (1x1 conv to encoder_stride**2 * C channels + PixelShuffle); "
            "convert the encoder alone with from_hf(hf_model.vit) (its mask token is dropped)"
        )
    if isinstance(hf_model, transformers.ViTForImageClassification):
        return "classification"
    if isinstance(hf_model, transformers.ViTModel):
        return "model"
    raise ValueError(
        f"hf_model={type(hf_model).__name__} is invalid: expected a transformers ViTModel or "
        "ViTForImageClassification"
    )


def config_from_hf(
    hf_config: Any,
    *,
    pooler_size: int | None,
    num_classes: int,
    fused_qkv: bool = True,
    attention: str = "sdpa",
) -> ViTConfig:
    """tfam ViTConfig for an HF ViTConfig. ``pooler_size`` is the ViTModel pooler's output
    width (None without a pooler); ``num_classes`` the classifier's (0 without one)."""
    activation = activation_from_hf(hf_config.hidden_act)
    if pooler_size is not None:
        pooler_act = getattr(hf_config, "pooler_act", "tanh")
        if pooler_act != "tanh":
            raise ValueError(
                f"pooler_act={pooler_act!r} is invalid for conversion: tfam's pre-logits layer "
                "(representation_size) is Linear + tanh, so only pooler_act='tanh' converts"
            )
    head_dim = getattr(hf_config, "head_dim", None)
    if head_dim is not None and head_dim * hf_config.num_attention_heads != hf_config.hidden_size:
        raise ValueError(
            f"head_dim={head_dim!r} is invalid for conversion: tfam's heads are "
            f"hidden_size / num_attention_heads = {hf_config.hidden_size} / "
            f"{hf_config.num_attention_heads} wide"
        )
    init_std = float(hf_config.initializer_range)
    return ViTConfig(
        dim=hf_config.hidden_size,
        depth=hf_config.num_hidden_layers,
        heads=hf_config.num_attention_heads,
        ffn_dim=hf_config.intermediate_size,
        activation=activation,
        norm="layernorm",
        norm_eps=float(hf_config.layer_norm_eps),
        norm_first=True,
        dropout=float(hf_config.hidden_dropout_prob),
        attn_dropout=float(hf_config.attention_probs_dropout_prob),
        attention=attention,
        qkv_bias=bool(hf_config.qkv_bias),
        fused_qkv=fused_qkv,
        init_std=init_std,
        image_size=hf_config.image_size,
        patch_size=hf_config.patch_size,
        in_channels=hf_config.num_channels,
        num_classes=num_classes,
        pool="cls",
        class_token=True,
        position="learned",
        pos_init_std=init_std,  # HF draws the position table with initializer_range too
        representation_size=pooler_size,
        final_norm=True,
    )


def _head_sizes(hf_model: Any, kind: str) -> dict[str, Any]:
    """The widths of an HF ViT's heads, as config_from_hf's ``pooler_size`` (a ViTModel's
    pooler, else None) and ``num_classes`` (a classifier's labels, else 0)."""
    pooler_size = None
    if kind == "model" and hf_model.pooler is not None:
        pooler_size = hf_model.pooler.dense.out_features
    num_classes = 0
    if kind == "classification":
        if isinstance(hf_model.classifier, nn.Linear):
            num_classes = hf_model.classifier.out_features
        elif not isinstance(hf_model.classifier, nn.Identity):
            raise ValueError(
                f"hf_model.classifier={type(hf_model.classifier).__name__} is invalid: "
                "expected the nn.Linear (or nn.Identity for num_labels=0) of ViTForImageClassification"
            )
    return {"pooler_size": pooler_size, "num_classes": num_classes}


def vit_from_hf(hf_model: Any, *, fused_qkv: bool = True, attention: str = "sdpa") -> ViT:
    """A tfam ViT computing what ``hf_model`` computes, with copies of its weights.

    - ``ViTForImageClassification``: ``model(x)`` equals ``hf_model(pixel_values=x).logits``
      (B, num_labels); ``num_labels=0`` (an Identity classifier) gives ``num_classes=0``.
    - ``ViTModel``: ``model.forward_features(x)`` equals ``last_hidden_state`` (B, 1 + N, D);
      its pooler (dense + tanh on [CLS]) becomes the pre-logits layer with
      ``representation_size`` = the pooler width and ``num_classes=0``, so ``model(x)`` equals
      ``pooler_output`` (B, D'). Without a pooler ``model(x)`` is the normed [CLS] token (B, D).

    ``fused_qkv`` keeps W_Q, W_K, W_V as one (3D, D) matrix (rows [q; k; v]); ``attention``
    names the tfam kernel. The result is in ``hf_model``'s train/eval mode, dtype and device.
    """
    kind = _hf_kind(hf_model)
    heads = _head_sizes(hf_model, kind)
    config = config_from_hf(hf_model.config, **heads, fused_qkv=fused_qkv, attention=attention)

    hf_state: dict[str, Tensor] = {}
    for key, value in hf_model.state_dict().items():
        prefix, rest = _split_prefix(key)
        if kind == "classification" and not prefix and not rest.startswith("classifier."):
            raise ValueError(f"hf_model has a weight {key!r} that tfam does not know")
        hf_state[canonical_hf_key(rest)] = value

    state, used = gather_weights(hf_state, weight_pairs(config))
    refuse_unused_weights(set(hf_state) - used - _IGNORED_HF_KEYS, "ViT")

    # Built on the meta device: no random init to pay for (or to draw from the caller's RNG);
    # load_state_dict(assign=True) then puts the copied tensors in place.
    with torch.device("meta"):
        model = ViT(config)
    model.load_state_dict(state, strict=True, assign=True)
    return model.train(hf_model.training)


def config_to_hf(
    model: ViT,
    *,
    id2label: dict[int, str] | None = None,
    attn_implementation: str | None = None,
) -> Any:
    """The transformers ViTConfig for a tfam ViT; refuses what HF ViT cannot express."""
    transformers = require_transformers()
    c = model.config

    refuse = refusal("Hugging Face ViT")
    if c.stem is not None:
        raise refuse("stem", c.stem, "HF ViT cuts the image into patches (no conv stem)")
    if not c.class_token:
        raise refuse("class_token", c.class_token, "HF ViT always prepends a [CLS] token")
    if c.pool != "cls":
        raise refuse("pool", c.pool, "HF ViT classifies from the [CLS] token (pool='cls')")
    if c.position != "learned":
        raise refuse("position", c.position, "HF ViT always adds a learned position table")
    refuse_unlike_blocks(c, "Hugging Face ViT", "HF ViT", norm_first=True)
    refuse_inexact_attention(c.attention, "Hugging Face ViT", c.attention_options)
    if c.representation_size and c.num_classes:
        raise refuse(
            "representation_size",
            c.representation_size,
            "ViTForImageClassification has no pre-logits layer (only ViTModel's pooler, "
            "which has no classifier); use num_classes=0 or representation_size=None",
        )
    warn_drop_path_dropped(c.drop_path, "HF ViT")
    if id2label is not None and len(id2label) != c.num_classes:
        raise ValueError(
            f"id2label has {len(id2label)} labels; expected num_classes={c.num_classes}"
        )

    def single(pair: tuple[int, int]) -> int | list[int]:
        return pair[0] if pair[0] == pair[1] else list(pair)

    values: dict[str, Any] = dict(
        encoder_fields_to_hf(c),
        image_size=single(c.image_size),
        patch_size=single(c.patch_size),
        num_channels=c.in_channels,
        qkv_bias=c.qkv_bias,
        attn_implementation=attn_implementation or TFAM_TO_HF_ATTN[c.attention],
    )
    if c.representation_size:
        values.update(pooler_output_size=c.representation_size, pooler_act="tanh")
    if c.num_classes:
        labels = id2label or {i: f"LABEL_{i}" for i in range(c.num_classes)}
        values.update(
            id2label={int(k): str(v) for k, v in labels.items()},
            label2id={str(v): int(k) for k, v in labels.items()},
        )
    return transformers.ViTConfig(**values)


def vit_to_hf(
    model: ViT,
    *,
    attn_implementation: str | None = None,
    id2label: dict[int, str] | None = None,
) -> PreTrainedModel:
    """The Hugging Face model computing what the tfam ViT computes, with copies of its weights.

    ``num_classes > 0`` -> ``ViTForImageClassification`` (logits (B, num_classes) equal
    ``model(x)``); ``num_classes == 0`` -> ``ViTModel``, with a pooler (dense + tanh) when the
    model has a ``representation_size`` pre-logits layer, so ``pooler_output`` equals
    ``model(x)``, and without one otherwise. ``attn_implementation`` defaults to 'eager' for
    tfam's 'math' kernel and 'sdpa' for 'sdpa'; ``id2label`` names the classes.

    Refused (``ValueError``): no [CLS] token, mean pooling, no or non-learned positions,
    RMSNorm, post-norm blocks, no final norm, gated MLPs (swiglu, geglu), approximate attention
    kernels, and a pre-logits layer together with a classifier.
    """
    if not isinstance(model, ViT):
        raise ValueError(f"model={type(model).__name__} is invalid: expected a tfam ViT")
    transformers = require_transformers()
    hf_config = config_to_hf(model, id2label=id2label, attn_implementation=attn_implementation)
    c = model.config
    if c.num_classes:
        hf = build_hf_model(lambda: transformers.ViTForImageClassification(hf_config), model)
    else:
        pooler = bool(c.representation_size)
        hf = build_hf_model(
            lambda: transformers.ViTModel(hf_config, add_pooling_layer=pooler), model
        )

    tfam_state = model.state_dict()
    canonical: dict[str, Tensor] = {}
    for hf_names, tfam_name in weight_pairs(c):
        value = tfam_state[tfam_name].detach()
        parts = value.chunk(len(hf_names), dim=0) if len(hf_names) > 1 else (value,)
        for name, part in zip(hf_names, parts, strict=True):
            canonical[name] = part
    prefix = "vit." if c.num_classes else ""
    state: dict[str, Tensor] = {}
    for key in hf.state_dict():
        head, rest = _split_prefix(key)
        name = canonical_hf_key(rest) if head == prefix else rest
        if name not in canonical:
            raise ValueError(f"the Hugging Face model has a weight {key!r} that tfam cannot fill")
        state[key] = canonical[name]
    hf.load_state_dict(state, strict=True)  # copies into HF's own tensors
    return hf.train(model.training)


def compare(tfam_model: ViT, hf_model: Any) -> float:
    """Max |difference| of the last hidden states and outputs (logits, pooler output, or the
    normed [CLS] token) of a tfam ViT and its HF counterpart on 2 random images."""
    c = tfam_model.config
    x = random_images(c.in_channels, c.image_size)
    base = hf_model.vit if hasattr(hf_model, "vit") else hf_model
    tokens = tfam_model.forward_features(x)
    ours = tfam_model.forward_head(tokens)
    out = base(pixel_values=x)
    hidden = out.last_hidden_state
    if base is not hf_model:
        theirs = hf_model(pixel_values=x).logits
    elif out.pooler_output is not None:
        theirs = out.pooler_output
    else:
        theirs = hidden[:, 0]
    return max((tokens - hidden).abs().max().item(), (ours - theirs).abs().max().item())


register_converter(
    Converter(
        model_type="vit",
        family=ViT,
        hf_classes=("ViTForImageClassification", "ViTModel"),
        from_hf=vit_from_hf,
        to_hf=vit_to_hf,
        compare=compare,
        sample="2 random images",
        optional_pooler={"ViTModel": "pooler.dense"},
    )
)

__all__ = [
    "HF_TO_TFAM_ACT",
    "INSTALL_HINT",
    "TFAM_TO_HF_ACT",
    "canonical_hf_key",
    "compare",
    "config_from_hf",
    "config_to_hf",
    "require_transformers",
    "vit_from_hf",
    "vit_to_hf",
    "weight_pairs",
]
