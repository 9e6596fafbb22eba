"""Hugging Face ResNet <-> tfam CNN: configs, weights, and what cannot cross.

``resnet_from_hf(hf_model)`` turns a transformers ``ResNetModel`` or
``ResNetForImageClassification`` into a tfam :class:`~tfam.models.cnn.CNN` with the same
outputs; ``resnet_to_hf(model)`` goes back. Both copy every weight and buffer (BatchNorm's
running statistics included) and refuse, with one ``ValueError`` line naming the field,
anything the other side cannot express.

tfam's conv bricks carry Hugging Face's names (:mod:`tfam.layers.conv`), so the map is a prefix:

==============================================  ==============================================
HF                                              tfam
==============================================  ==============================================
[resnet.]embedder.embedder.convolution / .norm  embedder.embedder.convolution / normalization
[resnet.]encoder.stages.i.layers.j.layer.k.*    encoder.stages.i.layers.j.layer.k.*
[resnet.]encoder.stages.i.layers.j.shortcut.*   encoder.stages.i.layers.j.shortcut.*
classifier.1 (ResNetForImageClassification)     head
==============================================  ==============================================

Hugging Face's stem is fixed (7x7 stride-2 conv + BN + act + 3x3 stride-2 max-pool) and its
BatchNorm epsilon is torch's 1e-5; HF configs have no image size (``image_size`` is an option
of ``from_hf``, 224 by default: a CNN runs at any size).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from tfam.interop.common import (
    build_hf_model,
    random_images,
    refusal,
    refuse_unused_weights,
    require_transformers,
    warn_drop_path_dropped,
)
from tfam.interop.registry import Converter, register_converter
from tfam.models.cnn import CNN, CNNConfig

if TYPE_CHECKING:  # transformers is optional: imported only when a conversion runs
    from transformers import PreTrainedModel

# HF's ACT2FN names -> tfam's conv activations (exact counterparts: ReLU, erf GELU, SiLU).
HF_TO_TFAM_CONV_ACT = {"relu": "relu", "gelu": "gelu", "silu": "silu", "swish": "silu"}
BATCHNORM_EPS = 1e-5  # nn.BatchNorm2d's default, which HF's ResNet uses everywhere


def _hf_kind(hf_model: Any) -> str:
    """'model' (ResNetModel) or 'classification' (ResNetForImageClassification)."""
    transformers = require_transformers()
    if isinstance(hf_model, transformers.ResNetForImageClassification):
        return "classification"
    if isinstance(hf_model, transformers.ResNetModel):
        return "model"
    raise ValueError(
        f"hf_model={type(hf_model).__name__} is invalid: expected a transformers ResNetModel "
        "or ResNetForImageClassification"
    )


def config_from_hf(hf_config: Any, *, num_classes: int, image_size: Any = 224) -> CNNConfig:
    """tfam CNNConfig for an HF ResNetConfig; ``num_classes`` is the classifier's width (0 for
    a ResNetModel)."""
    act = hf_config.hidden_act
    if not isinstance(act, str) or act not in HF_TO_TFAM_CONV_ACT:
        raise ValueError(
            f"hidden_act={act!r} is invalid for conversion: tfam's conv layers have exact "
            f"counterparts for {', '.join(map(repr, HF_TO_TFAM_CONV_ACT))}"
        )
    return CNNConfig(
        image_size=image_size,
        in_channels=hf_config.num_channels,
        num_classes=num_classes,
        stem="resnet",
        embedding_size=hf_config.embedding_size,
        hidden_sizes=tuple(hf_config.hidden_sizes),
        depths=tuple(hf_config.depths),
        layer_type=hf_config.layer_type,
        activation=HF_TO_TFAM_CONV_ACT[act],
        norm_eps=BATCHNORM_EPS,
        downsample_in_first_stage=bool(hf_config.downsample_in_first_stage),
        downsample_in_bottleneck=bool(getattr(hf_config, "downsample_in_bottleneck", False)),
    )


def _num_classes(hf_model: Any, kind: str) -> int:
    if kind == "model":
        return 0
    layer = hf_model.classifier[-1]
    if isinstance(layer, nn.Linear):
        return layer.out_features
    if isinstance(layer, nn.Identity):
        return 0
    raise ValueError(
        f"hf_model.classifier[-1]={type(layer).__name__} is invalid: expected the nn.Linear (or "
        "nn.Identity for num_labels=0) of ResNetForImageClassification"
    )


def _hf_name(tfam_name: str, kind: str) -> str:
    """The HF state-dict key of a tfam key in a ResNetModel ('model') or a
    ResNetForImageClassification ('classification')."""
    if tfam_name.startswith("head."):
        return "classifier.1." + tfam_name[len("head.") :]
    return ("resnet." if kind == "classification" else "") + tfam_name


def resnet_from_hf(
    hf_model: Any, *, image_size: Any = 224, fused_qkv: bool = True, attention: str = "sdpa"
) -> CNN:
    """A tfam CNN computing what ``hf_model`` computes, with copies of its weights and
    BatchNorm statistics.

    - ``ResNetForImageClassification``: ``model(x)`` equals ``hf_model(pixel_values=x).logits``.
    - ``ResNetModel``: ``num_classes=0``; ``model(x)`` (= ``forward_features``) equals
      ``pooler_output.flatten(1)`` (B, D) and ``model.forward_feature_map(x)`` equals
      ``last_hidden_state`` (B, D, h, w).

    ``image_size`` is the tfam config's (HF's config has none). The result is in ``hf_model``'s
    train/eval mode, dtype and device. ``fused_qkv`` and ``attention`` are the options every
    converter takes (``tfam convert`` passes them); a CNN has no attention, so any kernel but
    the default is refused.
    """
    if attention != "sdpa":
        raise ValueError(
            f"attention={attention!r} is invalid for a ResNet: a CNN has no attention layers"
        )
    kind = _hf_kind(hf_model)
    config = config_from_hf(
        hf_model.config, num_classes=_num_classes(hf_model, kind), image_size=image_size
    )
    hf_state = hf_model.state_dict()
    with torch.device("meta"):
        model = CNN(config)
    state: dict[str, Tensor] = {}
    for name in model.state_dict():
        key = _hf_name(name, kind)
        if key not in hf_state:
            raise ValueError(f"hf_model has no weight {key!r}; cannot convert it")
        state[name] = hf_state[key].detach().clone()
    refuse_unused_weights(set(hf_state) - {_hf_name(n, kind) for n in state}, "CNN")
    model.load_state_dict(state, strict=True, assign=True)
    return model.train(hf_model.training)


def config_to_hf(model: CNN, *, id2label: dict[int, str] | None = None) -> Any:
    """The transformers ResNetConfig for a tfam CNN; refuses what HF ResNet cannot express."""
    transformers = require_transformers()
    c = model.config
    refuse = refusal("Hugging Face ResNet")
    if c.stem != "resnet":
        raise refuse("stem", c.stem, "HF ResNet's stem is fixed: 7x7/2 conv + 3x3/2 max-pool")
    if c.norm_eps != BATCHNORM_EPS:
        raise refuse("norm_eps", c.norm_eps, f"HF ResNet's BatchNorm eps is {BATCHNORM_EPS}")
    warn_drop_path_dropped(c.drop_path, "HF ResNet")
    if c.dropout:
        warnings.warn(
            f"dropout={c.dropout} is dropped: HF ResNet has no dropout before its classifier "
            "(eval outputs are unchanged; training the HF model will differ)",
            stacklevel=3,
        )
    if id2label is not None and len(id2label) != c.num_classes:
        raise ValueError(
            f"id2label has {len(id2label)} labels; expected num_classes={c.num_classes}"
        )
    values: dict[str, Any] = dict(
        num_channels=c.in_channels,
        embedding_size=c.embedding_size,
        hidden_sizes=list(c.hidden_sizes),
        depths=list(c.depths),
        layer_type=c.layer_type,
        hidden_act=c.activation,
        downsample_in_first_stage=c.downsample_in_first_stage,
        downsample_in_bottleneck=c.downsample_in_bottleneck,
    )
    if c.num_classes:
        labels = id2label or {i: f"LABEL_{i}" for i in range(c.num_classes)}
        values.update(
            id2label={int(k): str(v) for k, v in labels.items()},
            label2id={str(v): int(k) for k, v in labels.items()},
        )
    return transformers.ResNetConfig(**values)


def resnet_to_hf(model: CNN, *, id2label: dict[int, str] | None = None) -> PreTrainedModel:
    """The Hugging Face model computing what the tfam CNN computes, with copies of its weights
    and BatchNorm statistics: ``ResNetForImageClassification`` for ``num_classes > 0`` (logits
    equal ``model(x)``), else ``ResNetModel`` (``pooler_output.flatten(1)`` equals
    ``model(x)``). Refused (one ValueError line): the small stem (``stem='small'``), a
    BatchNorm eps other than 1e-5."""
    if not isinstance(model, CNN):
        raise ValueError(f"model={type(model).__name__} is invalid: expected a tfam CNN")
    transformers = require_transformers()
    hf_config = config_to_hf(model, id2label=id2label)
    kind = "classification" if model.config.num_classes else "model"
    cls = (
        transformers.ResNetForImageClassification
        if kind == "classification"
        else (transformers.ResNetModel)
    )
    hf = build_hf_model(lambda: cls(hf_config), model)
    hf_keys = set(hf.state_dict())
    state = {}
    for name, value in model.state_dict().items():
        key = _hf_name(name, kind)
        if key not in hf_keys:
            raise ValueError(f"the Hugging Face model has no weight {key!r} for tfam's {name!r}")
        state[key] = value.detach()
    left = hf_keys - set(state)
    if left:
        raise ValueError(f"the Hugging Face model has weights tfam cannot fill: {sorted(left)[:4]}")
    hf.load_state_dict(state, strict=True)  # copies into HF's own tensors
    return hf.train(model.training)


def compare(tfam_model: CNN, hf_model: Any) -> float:
    """Max |difference| of the last feature maps and the outputs (logits, or pooled features
    for a ResNetModel) of a tfam CNN and its HF counterpart on 2 random images."""
    c = tfam_model.config
    x = random_images(c.in_channels, c.image_size)
    base = hf_model.resnet if hasattr(hf_model, "resnet") else hf_model
    out = base(pixel_values=x)
    fmap = tfam_model.forward_feature_map(x)
    ours = tfam_model(x)
    theirs = hf_model(pixel_values=x).logits if base is not hf_model else out.pooler_output
    return max(
        (fmap - out.last_hidden_state).abs().max().item(),
        (ours - theirs.flatten(1)).abs().max().item(),
    )


register_converter(
    Converter(
        model_type="resnet",
        family=CNN,
        hf_classes=("ResNetForImageClassification", "ResNetModel"),
        from_hf=resnet_from_hf,
        to_hf=resnet_to_hf,
        compare=compare,
        sample="2 random images",
    )
)

__all__ = ["compare", "config_from_hf", "config_to_hf", "resnet_from_hf", "resnet_to_hf"]
