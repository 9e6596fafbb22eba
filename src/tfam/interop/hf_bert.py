"""Hugging Face BERT <-> tfam BERT: configs, weights, and HF-format directories on disk.

``bert_from_hf(hf_model)`` turns a transformers ``BertModel``, ``BertForMaskedLM``,
``BertForTokenClassification`` or ``BertForSequenceClassification`` into a tfam
:class:`~tfam.models.bert.Bert` with the same outputs; ``bert_to_hf(model)`` goes back.
``load_hf_bert_dir(path)`` reads an HF-format directory (``config.json`` + ``model.safetensors``)
without transformers and without network (the packaged MiniLM, :mod:`tfam.interop.minilm`).
Everything is copied (no shared storage); what the other side cannot express is refused with
a ``ValueError`` naming it.

===============================================  ============================================
HF (``bert.`` prefix inside the task models)     tfam
===============================================  ============================================
embeddings.word_embeddings                       embed.tokens
embeddings.token_type_embeddings                 embed.segments
embeddings.position_embeddings                   embed.positions
embeddings.LayerNorm                             embed.norm
encoder.layer.i.attention.self.query/key/value   encoder.blocks.i.mhsa.qkv, rows [q; k; v]
                                                 (or mhsa.q_proj, k_proj, v_proj unfused)
encoder.layer.i.attention.output.dense           encoder.blocks.i.mhsa.out_proj
encoder.layer.i.attention.output.LayerNorm       encoder.blocks.i.norm1 (post-norm)
encoder.layer.i.intermediate.dense               encoder.blocks.i.mlp.fc1
encoder.layer.i.output.dense                     encoder.blocks.i.mlp.fc2
encoder.layer.i.output.LayerNorm                 encoder.blocks.i.norm2
pooler.dense (+ tanh)                            pooler.0
cls.predictions.transform.dense / LayerNorm      mlm.dense / mlm.norm
cls.predictions.decoder (tied) + bias            mlm.decoder (weight tied to embed.tokens)
classifier                                       classifier
===============================================  ============================================
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

import tfam.interop.common as common
from tfam.interop.registry import Converter, register_converter
from tfam.models.bert import Bert, BertConfig

HF_KINDS = {  # transformers class name -> (tfam head, key prefix of the encoder)
    "BertModel": ("none", ""),
    "BertForMaskedLM": ("mlm", "bert."),
    "BertForTokenClassification": ("token", "bert."),
    "BertForSequenceClassification": ("sequence", "bert."),
}
HEAD_TO_HF = {head: name for name, (head, _) in HF_KINDS.items()}
# Buffers and aliases in HF state dicts that carry no weight of their own.
_IGNORED_SUFFIXES = ("embeddings.position_ids", "embeddings.token_type_ids")


def _block_pairs(i: int, fused: bool) -> list[tuple[list[str], str]]:
    """(HF names, tfam name) for block i; several HF names are concatenated along dim 0."""
    hf, tf = f"encoder.layer.{i}.", f"encoder.blocks.{i}."
    pairs: list[tuple[list[str], str]] = []
    for s in ("weight", "bias"):
        pairs += [
            ([f"{hf}attention.output.dense.{s}"], f"{tf}mhsa.out_proj.{s}"),
            ([f"{hf}attention.output.LayerNorm.{s}"], f"{tf}norm1.{s}"),
            ([f"{hf}intermediate.dense.{s}"], f"{tf}mlp.fc1.{s}"),
            ([f"{hf}output.dense.{s}"], f"{tf}mlp.fc2.{s}"),
            ([f"{hf}output.LayerNorm.{s}"], f"{tf}norm2.{s}"),
        ]
        names = [f"{hf}attention.self.{p}.{s}" for p in ("query", "key", "value")]
        if fused:
            # tfam's fused projection is one (3D, D) matrix whose rows are [W_Q; W_K; W_V].
            pairs.append((names, f"{tf}mhsa.qkv.{s}"))
        else:
            pairs += [([n], f"{tf}mhsa.{p}_proj.{s}") for n, p in zip(names, "qkv", strict=True)]
    return pairs


def weight_pairs(config: BertConfig, prefix: str = "") -> list[tuple[list[str], str]]:
    """Every (HF names, tfam name) of a config; ``prefix`` is "bert." inside the task models
    (the heads, ``cls.`` and ``classifier``, sit outside it). The tied MLM decoder weight is
    the token table and is not listed."""
    pairs: list[tuple[list[str], str]] = []
    for s in ("weight", "bias"):
        pairs.append(([f"embeddings.LayerNorm.{s}"], f"embed.norm.{s}"))
    pairs += [
        (["embeddings.word_embeddings.weight"], "embed.tokens.weight"),
        (["embeddings.token_type_embeddings.weight"], "embed.segments.weight"),
        (["embeddings.position_embeddings.weight"], "embed.positions.weight"),
    ]
    for i in range(config.depth):
        pairs += _block_pairs(i, config.fused_qkv)
    if config.pooler:
        pairs += [([f"pooler.dense.{s}"], f"pooler.0.{s}") for s in ("weight", "bias")]
    pairs = [([prefix + n for n in names], tf) for names, tf in pairs]
    if config.head == "mlm":
        for s in ("weight", "bias"):
            pairs.append(([f"cls.predictions.transform.dense.{s}"], f"mlm.dense.{s}"))
            pairs.append(([f"cls.predictions.transform.LayerNorm.{s}"], f"mlm.norm.{s}"))
        pairs.append((["cls.predictions.bias"], "mlm.decoder.bias"))
    if config.head in ("token", "sequence"):
        pairs += [([f"classifier.{s}"], f"classifier.{s}") for s in ("weight", "bias")]
    return pairs


def _get(hf_config: Any, name: str, default: Any = None) -> Any:
    if isinstance(hf_config, dict):
        return hf_config.get(name, default)
    return getattr(hf_config, name, default)


def config_from_hf(
    hf_config: Any,
    *,
    head: str = "none",
    pooler: bool = False,
    num_labels: int | None = None,
    fused_qkv: bool = True,
    attention: str = "sdpa",
) -> BertConfig:
    """tfam BertConfig for an HF BertConfig (or the dict of its ``config.json``)."""
    activation = common.activation_from_hf(_get(hf_config, "hidden_act"))
    position = _get(hf_config, "position_embedding_type", "absolute")
    if position not in (None, "absolute"):
        raise ValueError(
            f"position_embedding_type={position!r} is invalid for conversion: tfam's BERT has "
            "learned absolute positions only"
        )
    if _get(hf_config, "is_decoder", False) or _get(hf_config, "add_cross_attention", False):
        raise ValueError(
            "is_decoder/add_cross_attention=True is invalid for conversion: tfam's BERT is a "
            "bidirectional encoder"
        )
    pad = _get(hf_config, "pad_token_id")
    return BertConfig(
        dim=_get(hf_config, "hidden_size"),
        depth=_get(hf_config, "num_hidden_layers"),
        heads=_get(hf_config, "num_attention_heads"),
        ffn_dim=_get(hf_config, "intermediate_size"),
        activation=activation,
        norm_eps=float(_get(hf_config, "layer_norm_eps")),
        norm_first=False,
        dropout=float(_get(hf_config, "hidden_dropout_prob")),
        attn_dropout=float(_get(hf_config, "attention_probs_dropout_prob")),
        attention=attention,
        fused_qkv=fused_qkv,
        init_std=float(_get(hf_config, "initializer_range", 0.02)),
        vocab_size=_get(hf_config, "vocab_size"),
        max_positions=_get(hf_config, "max_position_embeddings"),
        type_vocab_size=_get(hf_config, "type_vocab_size"),
        pad_token_id=0 if pad is None else int(pad),
        head=head,
        num_labels=num_labels or int(_get(hf_config, "num_labels", 2) or 2),
        pooler=pooler,
    )


def bert_from_state_dict(
    config: BertConfig, state: dict[str, Tensor], prefix: str = "", source: str = "hf_model"
) -> Bert:
    """A tfam Bert holding copies of an HF-named state dict; every HF weight must be used."""
    model = Bert(config)
    ours: dict[str, Tensor] = {}
    used: set[str] = set()
    missing = []
    for names, tf in weight_pairs(config, prefix):
        if not all(n in state for n in names):
            missing += [n for n in names if n not in state]
            continue
        ours[tf] = torch.cat([state[n] for n in names], dim=0).clone()
        used.update(names)
    # The decoder's own entries are the tied table and a second name of its bias.
    used.update({"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"})
    unused = sorted(k for k in state if k not in used and not k.endswith(_IGNORED_SUFFIXES))
    if missing or unused:
        raise ValueError(
            f"{source} does not match a BERT of this shape: missing {missing[:5]}, "
            f"not converted {unused[:5]}"
        )
    result = model.load_state_dict(ours, strict=False)
    left = sorted(set(result.missing_keys) - set(model.tied_aliases()))
    assert not left and not result.unexpected_keys, (left, result.unexpected_keys)
    return model.eval()


def _hf_kind(hf_model: Any) -> str:
    transformers = common.require_transformers()
    for name in HF_KINDS:
        cls = getattr(transformers, name)
        if type(hf_model) is cls:
            return name
    raise ValueError(
        f"hf_model={type(hf_model).__name__} is invalid: expected a transformers "
        f"{', '.join(HF_KINDS)}"
    )


def bert_from_hf(hf_model: Any, *, fused_qkv: bool = True, attention: str = "sdpa") -> Bert:
    """A tfam Bert computing what ``hf_model`` computes, with copies of its weights:
    ``BertModel`` -> head "none" (``model(ids, mask)`` = ``last_hidden_state``; with a pooler,
    ``model.pool(hidden)`` = ``pooler_output``); ``BertForMaskedLM`` -> "mlm",
    ``BertForTokenClassification`` -> "token", ``BertForSequenceClassification`` ->
    "sequence" (``model(...)`` = ``.logits``)."""
    kind = _hf_kind(hf_model)
    head, prefix = HF_KINDS[kind]
    state = hf_model.state_dict()
    pooler = f"{prefix}pooler.dense.weight" in state
    num_labels = getattr(hf_model, "num_labels", None) if head in ("token", "sequence") else None
    config = config_from_hf(
        hf_model.config,
        head=head,
        pooler=pooler,
        num_labels=num_labels,
        fused_qkv=fused_qkv,
        attention=attention,
    )
    return bert_from_state_dict(config, state, prefix, source=kind)


def load_hf_bert_dir(
    directory: str | Path, *, head: str = "none", fused_qkv: bool = True, attention: str = "sdpa"
) -> Bert:
    """A tfam Bert from an HF-format BERT directory (``config.json`` + ``model.safetensors``,
    as written by ``BertModel.save_pretrained``); no transformers, no network. A pooler in the
    file is kept (``model.pool``)."""
    from safetensors.torch import load_file

    directory = Path(directory)
    config_path, weights_path = directory / "config.json", directory / "model.safetensors"
    for path in (config_path, weights_path):
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} not found: an HF-format BERT directory holds config.json and "
                "model.safetensors"
            )
    hf_config = json.loads(config_path.read_text())
    if hf_config.get("model_type") != "bert":
        raise ValueError(
            f"{config_path} has model_type={hf_config.get('model_type')!r}; expected 'bert'"
        )
    state = load_file(str(weights_path))
    prefix = "bert." if any(k.startswith("bert.") for k in state) else ""
    config = config_from_hf(
        hf_config,
        head=head,
        pooler=f"{prefix}pooler.dense.weight" in state,
        fused_qkv=fused_qkv,
        attention=attention,
    )
    return bert_from_state_dict(config, state, prefix, source=str(weights_path))


def config_to_hf(config: BertConfig, **options: Any) -> Any:
    """The transformers BertConfig for a tfam BertConfig; refuses what BERT cannot express."""
    transformers = common.require_transformers()
    c = config
    problems = []
    if c.position != "learned":
        problems.append(f"position={c.position!r} (HF BERT adds a learned position table)")
    if c.norm_first:
        problems.append("norm_first=True (HF BERT is post-norm)")
    if c.norm != "layernorm":
        problems.append(f"norm={c.norm!r} (HF BERT uses LayerNorm)")
    if c.activation not in common.TFAM_TO_HF_ACT:
        problems.append(f"activation={c.activation!r} (no HF hidden_act counterpart)")
    if not c.qkv_bias:
        problems.append("qkv_bias=False (HF BERT's projections have biases)")
    if c.pooler and c.head in ("mlm", "token"):
        problems.append(f"pooler=True with head={c.head!r} (HF's {HEAD_TO_HF[c.head]} has none)")
    if problems:
        raise ValueError(f"config is invalid for conversion to HF BERT: {'; '.join(problems)}")
    common.refuse_inexact_attention(c.attention, "Hugging Face BERT", c.attention_options)
    common.warn_drop_path_dropped(c.drop_path, "HF BERT")
    values: dict[str, Any] = dict(
        common.encoder_fields_to_hf(c),
        vocab_size=c.vocab_size,
        max_position_embeddings=c.max_positions,
        type_vocab_size=c.type_vocab_size,
        pad_token_id=c.pad_token_id,
        num_labels=c.num_labels,
    )
    values.update(options)
    return transformers.BertConfig(**values)


def bert_to_hf(model: Bert, *, attn_implementation: str | None = None, **options: Any) -> Any:
    """The transformers model (by ``config.head``: BertModel, BertForMaskedLM,
    BertForTokenClassification, BertForSequenceClassification) computing what ``model``
    computes, with copies of its weights, on its device and dtype and in its train/eval mode.
    ``attn_implementation`` defaults to 'eager' for tfam's 'math' kernel and 'sdpa' otherwise;
    ``options`` go to transformers.BertConfig; ``id2label`` alone brings its ``label2id``.

    Refused (``ValueError``): positions other than learned, pre-norm blocks, RMSNorm, activations HF lacks, no Q/K/V bias, a
    pooler under a token or MLM head, attention kernels without an HF counterpart."""
    transformers = common.require_transformers()
    c = model.config
    kind = HEAD_TO_HF[c.head]
    if options.get("id2label") is not None and "label2id" not in options:
        options["label2id"] = {name: i for i, name in options["id2label"].items()}
    hf_config = config_to_hf(c, **options)
    cls = getattr(transformers, kind)
    if kind == "BertModel":
        hf = common.build_hf_model(lambda: cls(hf_config, add_pooling_layer=bool(c.pooler)), model)
    else:
        hf = common.build_hf_model(lambda: cls(hf_config), model)
    hf.set_attn_implementation(attn_implementation or common.TFAM_TO_HF_ATTN[c.attention])
    prefix = HF_KINDS[kind][1]
    ours = model.state_dict()
    state: dict[str, Tensor] = {}
    for names, tf in weight_pairs(c, prefix):
        parts = ours[tf].detach().clone().chunk(len(names), dim=0)
        state.update(zip(names, (p.contiguous() for p in parts), strict=True))
    if c.head == "mlm":
        state["cls.predictions.decoder.weight"] = state[
            f"{prefix}embeddings.word_embeddings.weight"
        ]
        state["cls.predictions.decoder.bias"] = state["cls.predictions.bias"]
    result = hf.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if not k.endswith(_IGNORED_SUFFIXES)]
    if missing or result.unexpected_keys:
        raise ValueError(
            f"{kind} did not take every weight: missing {missing[:5]}, unexpected "
            f"{result.unexpected_keys[:5]}"
        )
    if c.head == "mlm":
        hf.tie_weights()
    return hf.train(model.training)


def compare(tfam_model: Bert, hf_model: Any) -> float:
    """Max |difference| of the hidden states and the head's output (logits; pooler output of a
    BertModel with one) of a tfam BERT and its HF counterpart on 2 rows of 7 random ids, the
    second ending in 3 padding tokens."""
    c = tfam_model.config
    length = min(7, c.max_positions)
    ids = common.random_ids(c.vocab_size, length)
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[1, max(1, length - 3) :] = False
    ids[~mask] = c.pad_token_id
    hidden = tfam_model.forward_features(ids, mask)
    out = hf_model(input_ids=ids, attention_mask=mask.long(), output_hidden_states=True)
    diffs = [(hidden - out.hidden_states[-1]).abs().max().item()]
    if c.head != "none":
        diffs.append((tfam_model.forward_head(hidden) - out.logits).abs().max().item())
    elif getattr(out, "pooler_output", None) is not None and tfam_model.pooler is not None:
        diffs.append((tfam_model.pool(hidden) - out.pooler_output).abs().max().item())
    return max(diffs)


register_converter(
    Converter(
        model_type="bert",
        family=Bert,
        hf_classes=tuple(HF_KINDS),
        from_hf=bert_from_hf,
        to_hf=bert_to_hf,
        compare=compare,
        optional_pooler={"BertModel": "pooler.dense"},
        read_dir=load_hf_bert_dir,
    )
)
