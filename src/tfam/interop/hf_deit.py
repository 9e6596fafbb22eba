"""Hugging Face DeiT <-> tfam DeiT (a distilled one: [CLS], [DIST], two heads).

``deit_from_hf(hf_model)`` turns a transformers ``DeiTForImageClassificationWithTeacher`` or
``DeiTModel`` into a tfam :class:`~tfam.models.deit.DeiT` with the same outputs;
``deit_to_hf(model)`` goes back. The encoder is ViT's, named as in ``interop/hf_vit.py``
(``weight_pairs``, the 4.x names read too, under the prefix ``deit.``); DeiT adds:

=============================================  ============================================
HF                                             tfam
=============================================  ============================================
deit.embeddings.distillation_token (1, 1, D)   dist_token
deit.embeddings.position_embeddings (1, N+2, D)  pos_embed ([CLS], [DIST], patches)
cls_classifier                                 head (on [CLS])
distillation_classifier                        head_dist (on [DIST])
=============================================  ============================================

``logits`` of the teacher class are (cls_logits + distillation_logits) / 2, as tfam's
``model(x)``; ``model(x, both=True)`` gives the two. HF's ``layer_norm_eps`` (1e-12 by
default for DeiT, where timm and tfam's presets use 1e-6) is carried in ``norm_eps``.

Not converted, and why:

- ``DeiTModel``'s pooler (dense + tanh on [CLS]): a tfam DeiT's heads read [CLS] and [DIST]
  directly, so the pooler is left out with a warning (``last_hidden_state`` converts
  exactly; ``to_hf`` writes ``DeiTModel(add_pooling_layer=False)``).
- ``DeiTForImageClassification``: HF keeps a distillation token there that no head reads
  (one classifier on [CLS]); tfam has no such model, so it is refused in one line (convert
  its encoder with ``from_hf(hf_model.deit)``).
- A tfam DeiT with ``distilled=False`` is ViT's architecture: HF's DeiT classes always hold a
  distillation token, so ``to_hf`` refuses it (the facebook/deit-*-patch16-224 checkpoints
  themselves are ``ViTForImageClassification``).
- ``interpolate_pos_encoding``: tfam resamples its table bicubically for another grid on
  every call; HF does the same only when asked, keeping the two prefix rows (as tfam does).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from tfam.interop.common import (
    build_hf_model,
    gather_weights,
    random_images,
    refusal,
    refuse_unused_weights,
    require_transformers,
)
from tfam.interop.hf_vit import canonical_hf_key, config_from_hf, config_to_hf, weight_pairs
from tfam.interop.registry import Converter, register_converter
from tfam.models.deit import DeiT, DeiTConfig

if TYPE_CHECKING:
    from transformers import PreTrainedModel

_POOLER = {"pooler.dense.weight", "pooler.dense.bias"}
_IGNORED_HF_KEYS = {"embeddings.mask_token"}


def deit_weight_pairs(config: DeiTConfig) -> list[tuple[list[str], str]]:
    """(HF canonical names without the 'deit.' prefix, tfam name) of a distilled DeiT: ViT's
    encoder, the distillation token, and the two classifiers (outside the prefix in HF)."""
    pairs = [p for p in weight_pairs(config) if not p[0][0].startswith("classifier.")]
    pairs.append((["embeddings.distillation_token"], "dist_token"))
    if config.num_classes:
        for hf, tf in (("cls_classifier", "head"), ("distillation_classifier", "head_dist")):
            pairs += [([f"{hf}.weight"], f"{tf}.weight"), ([f"{hf}.bias"], f"{tf}.bias")]
    return pairs


def _hf_kind(hf_model: Any) -> str:
    """'teacher' (DeiTForImageClassificationWithTeacher) or 'model' (DeiTModel)."""
    transformers = require_transformers()
    if isinstance(hf_model, transformers.DeiTForImageClassificationWithTeacher):
        return "teacher"
    if isinstance(hf_model, transformers.DeiTForImageClassification):
        raise ValueError(
            "hf_model=DeiTForImageClassification is invalid: its distillation token is read by "
            "no head, which no tfam DeiT computes; convert its encoder with "
            "from_hf(hf_model.deit), or use DeiTForImageClassificationWithTeacher"
        )
    if isinstance(hf_model, transformers.DeiTModel):
        return "model"
    raise ValueError(
        f"hf_model={type(hf_model).__name__} is invalid: expected a transformers DeiTModel or "
        "DeiTForImageClassificationWithTeacher"
    )


def deit_from_hf(hf_model: Any, *, fused_qkv: bool = True, attention: str = "sdpa") -> DeiT:
    """A tfam DeiT (distilled) computing what ``hf_model`` computes, with copies of its weights.

    - ``DeiTForImageClassificationWithTeacher``: ``model(x)`` equals ``logits`` (B, K),
      ``model(x, both=True)`` equals (``cls_logits``, ``distillation_logits``).
    - ``DeiTModel``: ``model.forward_features(x)`` equals ``last_hidden_state``
      (B, N + 2, D); ``num_classes=0``; its pooler, if any, is left out (a warning says so).
    """
    kind = _hf_kind(hf_model)
    num_classes = hf_model.cls_classifier.out_features if kind == "teacher" else 0
    if kind == "teacher":
        for name in ("cls_classifier", "distillation_classifier"):
            if not isinstance(getattr(hf_model, name), nn.Linear):
                raise ValueError(
                    f"hf_model.{name}={type(getattr(hf_model, name)).__name__} is invalid: "
                    "expected an nn.Linear (num_labels > 0)"
                )
    vit = config_from_hf(
        hf_model.config,
        pooler_size=None,
        num_classes=num_classes,
        fused_qkv=fused_qkv,
        attention=attention,
    )
    values = {k: v for k, v in vit.to_dict().items() if k != "family"}
    config = DeiTConfig(**values, distilled=True)

    hf_state: dict[str, Tensor] = {}
    for key, value in hf_model.state_dict().items():
        rest = key[5:] if key.startswith("deit.") else key
        hf_state[canonical_hf_key(rest)] = value
    state, used = gather_weights(hf_state, deit_weight_pairs(config))
    pooler = _POOLER & set(hf_state)
    if pooler:
        warnings.warn(
            "DeiTModel's pooler (dense + tanh on [CLS]) has no counterpart in a tfam DeiT and "
            "is left out; last_hidden_state converts exactly",
            stacklevel=2,
        )
    refuse_unused_weights(set(hf_state) - used - pooler - _IGNORED_HF_KEYS, "DeiT")
    with torch.device("meta"):
        model = DeiT(config)
    model.load_state_dict(state, strict=True, assign=True)
    return model.train(hf_model.training)


def deit_to_hf(
    model: DeiT,
    *,
    attn_implementation: str | None = None,
    id2label: dict[int, str] | None = None,
) -> PreTrainedModel:
    """The Hugging Face model computing what the tfam DeiT computes, with copies of its
    weights: ``num_classes > 0`` -> ``DeiTForImageClassificationWithTeacher``, else
    ``DeiTModel(add_pooling_layer=False)``. Refuses (one ValueError line) what HF DeiT
    cannot compute: ``distilled=False``, and what ``vit_to_hf`` refuses (no [CLS], mean
    pooling, positions other than a learned table, other blocks or kernels)."""
    if not isinstance(model, DeiT):
        raise ValueError(f"model={type(model).__name__} is invalid: expected a tfam DeiT")
    transformers = require_transformers()
    c = model.config
    if not c.distilled:
        raise refusal("Hugging Face DeiT")(
            "distilled",
            c.distilled,
            "HF's DeiT always has a distillation token; without one a DeiT is ViT's "
            "architecture (ViTForImageClassification, as the facebook/deit-*-patch16-224 "
            "checkpoints)",
        )
    vit_config = config_to_hf(model, id2label=id2label, attn_implementation=attn_implementation)
    values = {
        k: v
        for k, v in vit_config.to_dict().items()
        if k not in ("model_type", "transformers_version", "architectures", "_attn_implementation")
    }
    hf_config = transformers.DeiTConfig(
        **values, attn_implementation=vit_config._attn_implementation
    )
    if c.num_classes:
        make = lambda: transformers.DeiTForImageClassificationWithTeacher(hf_config)  # noqa: E731
    else:
        make = lambda: transformers.DeiTModel(hf_config, add_pooling_layer=False)  # noqa: E731
    hf = build_hf_model(make, model)

    tfam_state = model.state_dict()
    canonical: dict[str, Tensor] = {}
    for hf_names, tfam_name in deit_weight_pairs(c):
        value = tfam_state[tfam_name].detach()
        parts = value.chunk(len(hf_names), dim=0) if len(hf_names) > 1 else (value,)
        for name, part in zip(hf_names, parts, strict=True):
            canonical[name] = part
    state: dict[str, Tensor] = {}
    for key in hf.state_dict():
        if key.startswith("deit."):
            name = canonical_hf_key(key[5:])
        else:
            name = canonical_hf_key(key) if not c.num_classes else key
        if name not in canonical:
            raise ValueError(f"the Hugging Face model has a weight {key!r} that tfam cannot fill")
        state[key] = canonical[name]
    hf.load_state_dict(state, strict=True)
    return hf.train(model.training)


def compare(tfam_model: DeiT, hf_model: Any) -> float:
    """Max |difference| of the last hidden states and the outputs (the averaged logits and
    each head's, for the teacher class) of a tfam DeiT and its HF counterpart on 2 random
    images."""
    c = tfam_model.config
    x = random_images(c.in_channels, c.image_size)
    base = hf_model.deit if hasattr(hf_model, "deit") else hf_model
    tokens = tfam_model.forward_features(x)
    diffs = [(tokens - base(pixel_values=x).last_hidden_state).abs().max().item()]
    if base is not hf_model:
        out = hf_model(pixel_values=x)
        cls_logits, dist_logits = tfam_model.forward_head(tokens, both=True)
        for ours, theirs in (
            (tfam_model.forward_head(tokens), out.logits),
            (cls_logits, out.cls_logits),
            (dist_logits, out.distillation_logits),
        ):
            diffs.append((ours - theirs).abs().max().item())
    return max(diffs)


register_converter(
    Converter(
        model_type="deit",
        family=DeiT,
        hf_classes=("DeiTForImageClassificationWithTeacher", "DeiTModel"),
        from_hf=deit_from_hf,
        to_hf=deit_to_hf,
        compare=compare,
        sample="2 random images",
        optional_pooler={"DeiTModel": "pooler.dense"},
    )
)

__all__ = ["compare", "deit_from_hf", "deit_to_hf", "deit_weight_pairs"]
