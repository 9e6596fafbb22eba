"""Hugging Face Swin <-> tfam Swin: configs, weights, and what cannot cross.

``swin_from_hf(hf_model)`` turns a transformers ``SwinModel`` or
``SwinForImageClassification`` into a tfam :class:`~tfam.models.swin.Swin` with the same
outputs; ``swin_to_hf(model)`` goes back. Both copy every weight and refuse, with one
``ValueError`` line naming the field, what the other side cannot compute.

Correspondence (HF names of transformers 5.x, under ``swin.`` in the classification model):

===========================================================  =====================================
HF                                                           tfam
===========================================================  =====================================
embeddings.patch_embeddings.projection (Conv2d)              patch_embed.proj
embeddings.norm                                              embed_norm
embeddings.position_embeddings (use_absolute_embeddings)     pos_embed (position='learned')
encoder.layers.s.blocks.j.layernorm_before / layernorm_after encoder.stages.s.blocks.j.norm1 / norm2
encoder.layers.s.blocks.j.attention.q_proj, k_proj, v_proj   encoder.stages.s.blocks.j.mhsa.qkv,
                                                             rows [q; k; v]
encoder.layers.s.blocks.j.attention.o_proj                   encoder.stages.s.blocks.j.mhsa.out_proj
...attention.relative_position_bias.relative_position_bias_table
                                                             ...mhsa.bias_provider.table
encoder.layers.s.blocks.j.mlp.fc1 / fc2                      encoder.stages.s.blocks.j.mlp.fc1 / fc2
encoder.layers.s.downsample (end of stage s)                 encoder.stages.s+1.downsample (start of
                                                             stage s+1)
layernorm                                                    norm
classifier (SwinForImageClassification)                      head
===========================================================  =====================================

Hugging Face's embedding norm and patch-merging norms are ``nn.LayerNorm`` with eps 1e-5
whatever ``layer_norm_eps`` says; tfam has one ``norm_eps``, so a config with another
``layer_norm_eps`` is refused (every published Swin uses 1e-5). Heads must double per stage
(tfam's Swin keeps the head width), and the MLP width int(mlp_ratio * dim) must be the one tfam
derives per stage. An image whose side is not a multiple of the patch (HF pads the pixels)
is refused by tfam's config. A stage whose grid is smaller than the window is not
converted: Hugging Face then runs a window of the grid's size with the config window's bias
table, and its forward fails (tfam builds that stage's table for the smaller window).
``embeddings.mask_token`` (SimMIM pre-training only) is left out;
``SwinForMaskedImageModeling`` and ``SwinBackbone`` are refused (convert ``hf_model.swin``).
Only the transformers 5.x names are read (5.x renames older checkpoints when it loads them).

The shifted-window mask: Hugging Face adds -100, tfam masks with -inf (see
:mod:`tfam.models.swin`); on any model whose scores within a window spread less than ~80 the
outputs agree to float32 rounding (the tests: 1e-5).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from tfam.interop.common import (
    TFAM_TO_HF_ACT,
    TFAM_TO_HF_ATTN,
    activation_from_hf,
    build_hf_model,
    gather_weights,
    random_images,
    refusal,
    refuse_inexact_attention,
    refuse_unlike_blocks,
    refuse_unused_weights,
    require_transformers,
)
from tfam.interop.registry import Converter, register_converter
from tfam.models.swin import Swin, SwinConfig

if TYPE_CHECKING:  # transformers is optional: imported only when a conversion runs
    from transformers import PreTrainedModel

# Hugging Face's embedding and patch-merging LayerNorms are built without layer_norm_eps.
HF_FIXED_EPS = 1e-5
_IGNORED_HF_KEYS = {"embeddings.mask_token"}


def _block_pairs(s: int, j: int, qkv_bias: bool, fused: bool) -> list[tuple[list[str], str]]:
    """(HF names, tfam name) for block j of stage s; Q, K, V are concatenated along dim 0."""
    hf, tf = f"encoder.layers.{s}.blocks.{j}.", f"encoder.stages.{s}.blocks.{j}."
    pairs: list[tuple[list[str], str]] = [
        (
            [f"{hf}attention.relative_position_bias.relative_position_bias_table"],
            f"{tf}mhsa.bias_provider.table",
        )
    ]
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
            pairs.append((names, f"{tf}mhsa.qkv.{suffix}"))  # rows [W_Q; W_K; W_V]
        else:
            pairs += [([n], f"{tf}mhsa.{p}_proj.{suffix}") for p, n in zip("qkv", names)]
    return pairs


def weight_pairs(config: SwinConfig) -> list[tuple[list[str], str]]:
    """Every (HF names without the 'swin.' prefix, tfam name) of a Swin config;
    'classifier.' sits outside that prefix in SwinForImageClassification."""
    pairs: list[tuple[list[str], str]] = [
        (["embeddings.patch_embeddings.projection.weight"], "patch_embed.proj.weight"),
        (["embeddings.patch_embeddings.projection.bias"], "patch_embed.proj.bias"),
        (["embeddings.norm.weight"], "embed_norm.weight"),
        (["embeddings.norm.bias"], "embed_norm.bias"),
    ]
    if config.position == "learned":
        pairs.append((["embeddings.position_embeddings"], "pos_embed"))
    for s, depth in enumerate(config.depths):
        for j in range(depth):
            pairs += _block_pairs(s, j, config.qkv_bias, config.fused_qkv)
        if s + 1 < len(config.depths):  # HF merges at the end of stage s, tfam at s+1's start
            hf, tf = f"encoder.layers.{s}.downsample.", f"encoder.stages.{s + 1}.downsample."
            pairs += [([f"{hf}reduction.weight"], f"{tf}reduction.weight")]
            pairs += [([f"{hf}norm.{x}"], f"{tf}norm.{x}") for x in ("weight", "bias")]
    pairs += [(["layernorm.weight"], "norm.weight"), (["layernorm.bias"], "norm.bias")]
    if config.num_classes:
        pairs += [(["classifier.weight"], "head.weight"), (["classifier.bias"], "head.bias")]
    return pairs


def _hf_kind(hf_model: Any) -> str:
    """'model' (SwinModel) or 'classification' (SwinForImageClassification); refuse the rest."""
    transformers = require_transformers()
    for name in ("SwinForMaskedImageModeling", "SwinBackbone"):
        cls = getattr(transformers, name, None)
        if cls is not None and isinstance(hf_model, cls):
            raise ValueError(
                f"hf_model={name} is invalid: tfam's Swin has no counterpart of its "
                f"{'SimMIM pixel decoder' if 'Masked' in name else 'per-stage feature maps'}; "
                "convert the encoder alone with from_hf(hf_model.swin)"
            )
    if isinstance(hf_model, transformers.SwinForImageClassification):
        return "classification"
    if isinstance(hf_model, transformers.SwinModel):
        return "model"
    raise ValueError(
        f"hf_model={type(hf_model).__name__} is invalid: expected a transformers SwinModel or "
        "SwinForImageClassification"
    )


def _check_windows(config: SwinConfig, window: int, what: str) -> None:
    """Hugging Face runs windows of min(grid) with the config window's table, which fails
    when a stage's grid is smaller than the window: refuse (``what`` names the side)."""
    for s, grid in enumerate(config.stage_grids(), start=1):
        if min(grid) < window:
            raise ValueError(
                f"{what}={window} is invalid for conversion: stage {s} runs on a {grid[0]}x"
                f"{grid[1]} grid, smaller than the window; Hugging Face's Swin then adds a "
                f"{window}x{window} window's bias table to smaller windows and fails (use a "
                f"window <= {min(grid)} or a larger image_size)"
            )


def config_from_hf(
    hf_config: Any, *, num_classes: int, fused_qkv: bool = True, attention: str = "sdpa"
) -> SwinConfig:
    """tfam SwinConfig for an HF SwinConfig; ``num_classes`` is the classifier's (0: none)."""
    activation = activation_from_hf(hf_config.hidden_act)
    heads = list(hf_config.num_heads)
    doubling = [heads[0] * 2**s for s in range(len(heads))]
    if heads != doubling:
        raise ValueError(
            f"num_heads={heads!r} is invalid for conversion: tfam's Swin doubles the heads "
            f"with the width at every stage ({doubling})"
        )
    if float(hf_config.layer_norm_eps) != HF_FIXED_EPS:
        raise ValueError(
            f"layer_norm_eps={hf_config.layer_norm_eps!r} is invalid for conversion: Hugging "
            f"Face's embedding and patch-merging LayerNorms keep eps {HF_FIXED_EPS}, and tfam's "
            "Swin has one norm_eps"
        )
    dim = int(hf_config.embed_dim)
    ratio = float(hf_config.mlp_ratio)
    ffn_dim = int(ratio * dim)
    for s in range(len(heads)):
        width = dim * 2**s
        if int(ratio * width) != int(width * (ffn_dim / dim)):
            raise ValueError(
                f"mlp_ratio={ratio!r} is invalid for conversion: stage {s + 1}'s MLP is "
                f"int({ratio} * {width}) = {int(ratio * width)} wide in Hugging Face, but tfam "
                f"keeps the first stage's ratio {ffn_dim}/{dim}"
            )
    init_std = float(hf_config.initializer_range)
    config = SwinConfig(
        dim=dim,
        heads=heads[0],
        depths=tuple(hf_config.depths),
        window=int(hf_config.window_size),
        ffn_dim=ffn_dim,
        activation=activation,
        norm="layernorm",
        norm_eps=HF_FIXED_EPS,
        dropout=float(hf_config.hidden_dropout_prob),
        attn_dropout=float(hf_config.attention_probs_dropout_prob),
        drop_path=float(hf_config.drop_path_rate),
        attention=attention,
        qkv_bias=bool(hf_config.qkv_bias),
        fused_qkv=fused_qkv,
        init_std=init_std,
        position="learned" if hf_config.use_absolute_embeddings else "none",
        image_size=hf_config.image_size,
        patch_size=hf_config.patch_size,
        in_channels=hf_config.num_channels,
        num_classes=num_classes,
    )
    _check_windows(config, config.window, "window_size")
    return config


def swin_from_hf(hf_model: Any, *, fused_qkv: bool = True, attention: str = "sdpa") -> Swin:
    """A tfam Swin computing what ``hf_model`` computes, with copies of its weights.

    - ``SwinForImageClassification``: ``model(x)`` equals ``hf_model(pixel_values=x).logits``
      (B, num_labels); ``num_labels=0`` (an Identity classifier) gives ``num_classes=0``.
    - ``SwinModel``: ``model.forward_features(x)`` equals ``last_hidden_state`` (B, N_S, D_S)
      and ``model(x)`` (``num_classes=0``: the averaged tokens) equals ``pooler_output``.

    ``fused_qkv`` keeps W_Q, W_K, W_V as one (3D, D) matrix (rows [q; k; v]); ``attention``
    names the tfam kernel. The result is in ``hf_model``'s train/eval mode."""
    kind = _hf_kind(hf_model)
    num_classes = 0
    if kind == "classification":
        if isinstance(hf_model.classifier, nn.Linear):
            num_classes = hf_model.classifier.out_features
        elif not isinstance(hf_model.classifier, nn.Identity):
            raise ValueError(
                f"hf_model.classifier={type(hf_model.classifier).__name__} is invalid: expected "
                "the nn.Linear (or nn.Identity for num_labels=0) of SwinForImageClassification"
            )
    config = config_from_hf(
        hf_model.config, num_classes=num_classes, fused_qkv=fused_qkv, attention=attention
    )
    hf_state: dict[str, Tensor] = {}
    for key, value in hf_model.state_dict().items():
        if kind == "classification":
            if key.startswith("swin."):
                key = key[len("swin.") :]
            elif not key.startswith("classifier."):
                raise ValueError(f"hf_model has a weight {key!r} that tfam does not know")
        hf_state[key] = value
    state, used = gather_weights(hf_state, weight_pairs(config))
    refuse_unused_weights(set(hf_state) - used - _IGNORED_HF_KEYS, "Swin")
    with torch.device("meta"):  # no random init to pay for, nor to draw from the caller's RNG
        model = Swin(config)
    model.load_state_dict(state, strict=True, assign=True)
    return model.train(hf_model.training)


def config_to_hf(
    model: Swin,
    *,
    id2label: dict[int, str] | None = None,
    attn_implementation: str | None = None,
) -> Any:
    """The transformers SwinConfig for a tfam Swin; refuses what HF Swin cannot compute."""
    transformers = require_transformers()
    c = model.config
    target = "Hugging Face Swin"
    refuse = refusal(target)
    refuse_unlike_blocks(c, target, "HF Swin", norm_first=True, norm_eps=HF_FIXED_EPS)
    refuse_inexact_attention(c.attention, target, c.attention_options)
    if c.position not in ("none", "learned"):
        raise refuse(
            "position",
            c.position,
            "HF Swin adds a learned table (use_absolute_embeddings) or nothing: 'learned' or "
            "'none'",
        )
    _check_windows(c, c.window, "window")
    ratio = c.ffn_dim / c.dim  # HF: int(mlp_ratio * width) per stage, as StageStack does
    if c.drop_path:
        warnings.warn(
            f"drop_path={c.drop_path} becomes drop_path_rate: HF's SwinLayer drops the attention "
            "branch only, tfam both branches (eval outputs are unchanged; training the HF model "
            "will differ)",
            stacklevel=3,
        )
    if id2label is not None and len(id2label) != c.num_classes:
        raise ValueError(
            f"id2label has {len(id2label)} labels; expected num_classes={c.num_classes}"
        )

    def single(pair: tuple[int, int]) -> int | list[int]:
        return pair[0] if pair[0] == pair[1] else list(pair)

    values: dict[str, Any] = dict(
        image_size=single(c.image_size),
        patch_size=single(c.patch_size),
        num_channels=c.in_channels,
        embed_dim=c.dim,
        depths=list(c.depths),
        num_heads=[c.heads * 2**s for s in range(len(c.depths))],
        window_size=c.window,
        mlp_ratio=ratio,
        qkv_bias=c.qkv_bias,
        hidden_act=TFAM_TO_HF_ACT[c.activation],
        hidden_dropout_prob=c.dropout,
        attention_probs_dropout_prob=c.attn_dropout,
        drop_path_rate=c.drop_path,
        use_absolute_embeddings=c.position == "learned",
        initializer_range=c.init_std,
        layer_norm_eps=c.norm_eps,
        attn_implementation=attn_implementation or TFAM_TO_HF_ATTN[c.attention],
    )
    if c.num_classes:
        labels = id2label or {i: f"LABEL_{i}" for i in range(c.num_classes)}
        values.update(
            id2label={int(k): str(v) for k, v in labels.items()},
            label2id={str(v): int(k) for k, v in labels.items()},
        )
    return transformers.SwinConfig(**values)


def swin_to_hf(
    model: Swin,
    *,
    attn_implementation: str | None = None,
    id2label: dict[int, str] | None = None,
) -> PreTrainedModel:
    """The Hugging Face model computing what the tfam Swin computes, with copies of its
    weights: ``SwinForImageClassification`` when ``num_classes > 0`` (logits equal
    ``model(x)``), else ``SwinModel`` (``pooler_output`` equals ``model(x)``).

    Refused (``ValueError``): RMSNorm, a LayerNorm eps other than 1e-5, gated MLPs,
    approximate attention kernels, positions other than 'learned'/'none', and a stage whose
    grid is smaller than the window."""
    if not isinstance(model, Swin):
        raise ValueError(f"model={type(model).__name__} is invalid: expected a tfam Swin")
    transformers = require_transformers()
    hf_config = config_to_hf(model, id2label=id2label, attn_implementation=attn_implementation)
    c = model.config
    if c.num_classes:
        hf = build_hf_model(lambda: transformers.SwinForImageClassification(hf_config), model)
    else:
        hf = build_hf_model(lambda: transformers.SwinModel(hf_config), model)
    tfam_state = model.state_dict()
    canonical: dict[str, Tensor] = {}
    for hf_names, tfam_name in weight_pairs(c):
        value = tfam_state[tfam_name].detach()
        parts = value.chunk(len(hf_names), dim=0) if len(hf_names) > 1 else (value,)
        for name, part in zip(hf_names, parts, strict=True):
            canonical[name] = part
    state: dict[str, Tensor] = {}
    for key in hf.state_dict():
        name = key[len("swin.") :] if c.num_classes and key.startswith("swin.") else key
        if name not in canonical:
            raise ValueError(f"the Hugging Face model has a weight {key!r} that tfam cannot fill")
        state[key] = canonical[name]
    hf.load_state_dict(state, strict=True)  # copies into HF's own tensors
    return hf.train(model.training)


def compare(tfam_model: Swin, hf_model: Any) -> float:
    """Max |difference| of the last hidden states and outputs (logits, or the pooled
    features) of a tfam Swin and its HF counterpart on 2 random images."""
    c = tfam_model.config
    x = random_images(c.in_channels, c.image_size)
    param = next(tfam_model.parameters())
    x = x.to(device=param.device, dtype=param.dtype)
    base = hf_model.swin if hasattr(hf_model, "swin") else hf_model
    tokens = tfam_model.forward_features(x)
    ours = tfam_model.forward_head(tokens)
    out = base(pixel_values=x)
    if base is not hf_model:
        theirs = hf_model(pixel_values=x).logits
    elif out.pooler_output is not None:
        theirs = out.pooler_output
    else:
        theirs = out.last_hidden_state.mean(dim=1)
    hidden = (tokens - out.last_hidden_state).abs().max().item()
    return max(hidden, (ours - theirs).abs().max().item())


register_converter(
    Converter(
        model_type="swin",
        family=Swin,
        hf_classes=("SwinForImageClassification", "SwinModel"),
        from_hf=swin_from_hf,
        to_hf=swin_to_hf,
        compare=compare,
        sample="2 random images",
    )
)

__all__ = [
    "compare",
    "config_from_hf",
    "config_to_hf",
    "swin_from_hf",
    "swin_to_hf",
    "weight_pairs",
]
