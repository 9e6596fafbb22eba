"""``explain`` (a model, a preset, a family or a model directory), ``explain_stack`` (a bare
TransformerStack), and the registry through which a family adds its embedding and head rows."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from tfam.explain.blocks import stack_rows
from tfam.explain.bricks import Explainer
from tfam.explain.table import BLOCK_MODES, FLOP_NOTE, ExplainRow, ExplainTable
from tfam.explain.trace import meta_copy, size_guard, trace
from tfam.layers import MultiHeadAttention, TransformerStack
from tfam.models.base import CONFIG_NAME, MODEL_CLASSES, TfamModel

# One element of the batch, for the totals line ("FLOPs per sequence"), by what the model reads
# (``TfamModel.inputs``); a family explainer may name its own in ``sample``.
SAMPLES = {
    "image": "image",
    "tokens": "sequence",
    "token-pairs": "source-target pair",
    "audio": "utterance",
}


def forms_weights(module: nn.Module) -> bool:
    """Whether every attention kernel in ``module`` can return its weights."""
    return not any(
        "need_weights" in m.kernel.refuses
        for m in module.modules()
        if isinstance(m, MultiHeadAttention)
    )


class FamilyExplainer(ABC):
    """What a family writes to be explained (one small module in ``tfam/explain/families/``,
    decorated with :func:`register_family`):

    - ``symbols()``: the values of its shape symbols ({"N": 196, "D": 768, ...});
    - ``inputs()``: the example forward call on the meta device, (args, kwargs);
    - ``embedding_rows(ex)`` and ``head_rows(ex)``: its own steps before and after the stack;
    - ``header(name)``: the lines above the table;
    - ``length``: the symbol of the stack's sequence length ("(N+1)");
    - ``model_class``: the model class it reads (any other model is a one-line TypeError);
    - ``sample``: one element of the batch, when the model's ``inputs`` do not say it
      (:data:`SAMPLES`);
    - ``takes_seq_len``: True for a family over token sequences, whose table is then shown at
      ``seq_len`` tokens (:meth:`tokens`; default: its context, ``max_positions``).

    The stack's rows come from the bricks (:func:`~tfam.explain.blocks.stack_rows`). A family
    with more than one stack (encoder-decoder) overrides :meth:`rows`.
    """

    length: str = "L"
    sample: str = ""  # "" = from the model's ``inputs`` (SAMPLES), else "sample"
    # The model class it reads (its attributes, by name); None takes any TfamModel.
    model_class: ClassVar[type[TfamModel] | None] = None
    takes_seq_len: ClassVar[bool] = False

    def __init__(self, model: TfamModel, batch_size: int, seq_len: int | None = None) -> None:
        wanted = self.model_class
        if wanted is not None and not isinstance(model, wanted):
            raise TypeError(
                f"the {wanted.config_class.family} explainer takes a {wanted.__name__}, got "
                f"{type(model).__name__}"
            )
        self.model, self.batch, self.seq_len = model, batch_size, seq_len
        self.sample = self.sample or SAMPLES.get(type(model).inputs, "sample")

    def attention_kwargs(self) -> dict[str, Any]:
        """``return_attention=True`` (every block runs over every token, ViT's last block
        included), unless a kernel of the model never forms weights (chunked, linear,
        performer, lsh): the trace then runs the plain forward."""
        return {"return_attention": True} if forms_weights(self.model) else {}

    def tokens(self) -> int:
        """L, the sequence length of the table: ``seq_len`` when given, else the context."""
        return self.seq_len or int(self.model.config.max_positions)

    def length_line(self, symbols: str) -> str:
        """'L = max_positions = 128 tokens', or 'L = 64 tokens (max_positions = 128)' at a
        given ``seq_len`` (``symbols``: "L", "Ls = Lt")."""
        limit = self.model.config.max_positions
        if self.seq_len is None:
            return f"{symbols} = max_positions = {limit} tokens"
        return f"{symbols} = {self.seq_len} tokens (of max_positions = {limit})"

    @abstractmethod
    def symbols(self) -> dict[str, int]: ...

    @abstractmethod
    def inputs(self) -> tuple[tuple[Any, ...], dict[str, Any]]: ...

    def embedding_rows(self, ex: Explainer) -> list[ExplainRow]:
        return []

    def head_rows(self, ex: Explainer) -> list[ExplainRow]:
        return []

    def header(self, name: str) -> list[str]:
        return [f"{name}: batch size {self.batch}"]

    def stack(self) -> TransformerStack:
        """The model's one TransformerStack."""
        stacks = [m for m in self.model.modules() if isinstance(m, TransformerStack)]
        if len(stacks) != 1:
            raise TypeError(f"{type(self).__name__} found {len(stacks)} stacks; override rows()")
        return stacks[0]

    def rows(self, ex: Explainer) -> list[ExplainRow]:
        stack = stack_rows(ex, self.stack(), self.length)
        return [*self.embedding_rows(ex), *stack, *self.head_rows(ex)]


FAMILIES: dict[str, type[FamilyExplainer]] = {}


def register_family(
    *families: str,
) -> Callable[[type[FamilyExplainer]], type[FamilyExplainer]]:
    """Class decorator: ``@register_family("vit")`` makes ``explain`` use it for that family."""

    def add(cls: type[FamilyExplainer]) -> type[FamilyExplainer]:
        for family in families:
            FAMILIES[family] = cls
        return cls

    return add


def _resolve_model(model_or_name: Any, overrides: dict[str, Any]) -> tuple[TfamModel, str]:
    """A model to trace and the name to show. Names and directories are built on the meta
    device: no weights are allocated or loaded, so even the largest preset is instant. A built
    model is never traced itself: its meta copy is (same structure and ties, no storage)."""
    from tfam.config import BaseConfig
    from tfam.models.registry import PRESETS, create_config

    if isinstance(model_or_name, TfamModel):
        if overrides:
            raise ValueError(
                f"config overrides {sorted(overrides)} apply to a name or a model directory, "
                f"not to a built model; pass the name, e.g. "
                f"explain('{model_or_name.config.family}', ...), or build the model with them"
            )
        name = f"{type(model_or_name).__name__} ({model_or_name.config.family})"
        return meta_copy(model_or_name), name
    if not isinstance(model_or_name, str | Path):
        raise ValueError(
            f"model_or_name={model_or_name!r} is invalid: expected a tfam model, a preset or "
            "family name, a model directory, or a TransformerStack"
        )
    name, path = str(model_or_name), Path(model_or_name)
    if name in PRESETS or name in MODEL_CLASSES:
        config = create_config(name, **overrides)
    elif path.is_dir():
        if not (path / CONFIG_NAME).is_file():
            raise FileNotFoundError(
                f"{path / CONFIG_NAME} not found: a model directory holds {CONFIG_NAME} and "
                "model.safetensors (written by model.save_pretrained or `tfam train`)"
            )
        # The config fixes the architecture; the weights are not needed to explain it.
        config = BaseConfig.from_json(path / CONFIG_NAME)
        config = config.replace(**overrides) if overrides else config
    else:
        raise ValueError(
            f"model_or_name={name!r} is not a preset, a family or a model directory; presets: "
            f"{', '.join(sorted(PRESETS))}; families: {', '.join(sorted(MODEL_CLASSES))}"
        )
    building = f"building {name}" + (f" with {overrides}" if overrides else "")
    with torch.device("meta"), size_guard(building, overrides):
        return MODEL_CLASSES[config.family](config), name


def _check_seq_len(seq_len: Any, family: str, model: TfamModel) -> None:
    """``seq_len`` applies to a family over token sequences, within its context."""
    if seq_len is None:
        return
    if not FAMILIES[family].takes_seq_len:
        texts = ", ".join(sorted(f for f, cls in FAMILIES.items() if cls.takes_seq_len))
        raise ValueError(
            f"seq_len={seq_len!r} is invalid: the {family!r} family reads "
            f"{SAMPLES.get(type(model).inputs, 'input')}s, not token sequences (seq_len "
            f"applies to the token-sequence families: {texts})"
        )
    if not isinstance(seq_len, int) or isinstance(seq_len, bool) or seq_len < 1:
        raise ValueError(f"seq_len={seq_len!r} is invalid: expected a positive int")
    # A learned table bounds the length; other positions run past max_positions.
    model.config.check_length(seq_len, f"seq_len={seq_len} is invalid: the sequence")


def _check_view(batch_size: Any, blocks: Any) -> None:
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} is invalid: expected a positive int")
    if blocks not in BLOCK_MODES:
        raise ValueError(f"blocks={blocks!r} is invalid: expected one of {BLOCK_MODES}")


def _table(
    module: nn.Module, real: int, ex: Explainer, rows: list[ExplainRow], **fields: Any
) -> ExplainTable:
    """The table, once every parameter of ``module`` (the traced copy) is claimed by exactly
    one step and the total is ``real``, the caller's model's count (``parameters()`` counts
    a tied weight once)."""
    ex.check_symbols(rows)
    total_params = sum(r.params for r in rows if r.level == 0)
    if total_params != real or len(ex.claimed) != len(dict.fromkeys(map(id, module.parameters()))):
        unclaimed = [n for n, p in module.named_parameters() if id(p) not in ex.claimed]
        raise RuntimeError(
            f"explain counted {total_params:,} parameters but the model has {real:,}; "
            f"not in any step: {unclaimed}"
        )
    return ExplainTable(
        symbols=dict(ex.env),
        rows=rows,
        total_params=total_params,
        total_flops=sum(r.flops for r in rows if r.level == 0),
        blocks=ex.blocks,
        notes=[FLOP_NOTE],
        **fields,
    )


def explain(
    model_or_name: TfamModel | TransformerStack | str | Path,
    batch_size: int = 1,
    blocks: str = "first",
    seq_len: int | None = None,
    **overrides: Any,
) -> ExplainTable:
    """Step-by-step table of a model: per step its input and output shape, parameters, FLOPs.

    ``model_or_name``: a built model, a preset or family name (``"vit_base_patch16_224"``,
    ``"vit"``) with config fields as ``overrides``, or a model directory from
    ``save_pretrained``. Names and directories are built on the meta device (instant, no
    memory); a built model is never touched: its meta copy (same modules and ties, no
    storage; :func:`~tfam.explain.trace.meta_copy`) is traced, and the total is checked
    against the model's ``parameters()`` (a tied weight once). ``batch_size`` B scales the
    FLOPs and leads every shape. ``blocks='first'`` shows block 1 in full and one summary row
    for blocks 2..N; ``'all'`` lists every block. ``seq_len`` (token-sequence families: GPT,
    BERT, the encoder–decoder): the length L the table is shown at, 1..max_positions (default:
    max_positions).

    A bare :class:`~tfam.layers.TransformerStack` takes ``seq_len`` (and ``memory_len`` for a
    decoder) instead of overrides: ``explain(stack, seq_len=5, memory_len=7)`` is
    :func:`explain_stack`.

    Raises ``ValueError`` for unknown names, bad overrides, bad arguments, and models too large
    for a tensor to describe (naming the size).
    """
    if isinstance(model_or_name, TransformerStack):
        if seq_len is not None:
            overrides["seq_len"] = seq_len
        return explain_stack(model_or_name, batch_size=batch_size, blocks=blocks, **overrides)
    _check_view(batch_size, blocks)
    real = model_or_name.num_parameters() if isinstance(model_or_name, TfamModel) else None
    model, name = _resolve_model(model_or_name, overrides)
    family = model.config.family
    if family not in FAMILIES:
        raise ValueError(
            f"explain does not know the family {family!r} yet (it knows {sorted(FAMILIES)}); "
            f"a family adds its rows in tfam/explain/families/{family}.py"
        )
    _check_seq_len(seq_len, family, model)
    extra = {} if seq_len is None else {"seq_len": seq_len}
    fam = FAMILIES[family](model, batch_size, **extra)
    with size_guard(f"the example input of {name}", model.config.to_dict()):
        args, kwargs = fam.inputs()
    ex = Explainer(trace(model, args, kwargs), fam.symbols(), blocks)
    real = model.num_parameters() if real is None else real
    return _table(model, real, ex, fam.rows(ex), name=name, family=family,
                  config=model.config.to_dict(), batch_size=batch_size,
                  header=fam.header(name), sample=fam.sample)  # fmt: skip


def explain_stack(
    stack: TransformerStack,
    seq_len: int,
    memory_len: int | None = None,
    batch_size: int = 1,
    blocks: str = "first",
) -> ExplainTable:
    """The table of a bare TransformerStack over ``seq_len`` tokens of width D.

    An encoder stack (causal or not) reads x (B, L, D). A decoder stack reads x (B, Lt, D)
    with ``seq_len`` = Lt and the encoder output (B, Ls, D) with ``memory_len`` = Ls: its rows
    show masked self-attention (scores Lt x Lt), cross-attention (Q from Lt tokens, K and V
    from Ls, scores Lt x Ls) and the MLP. Shapes, parameters and FLOPs as in :func:`explain`.
    """
    _check_view(batch_size, blocks)
    decoder = stack.kind == "decoder"
    for arg, value in (("seq_len", seq_len), ("memory_len", memory_len)):
        if value is not None and (type(value) is not int or value < 1):
            raise ValueError(f"{arg}={value!r} is invalid: expected a positive int")
    if decoder and memory_len is None:
        raise ValueError("memory_len=None is invalid: a decoder stack reads an encoder output")
    if not decoder and memory_len is not None:
        raise ValueError(f"memory_len={memory_len!r} is invalid: an encoder stack has no memory")
    if not stack.blocks:
        raise ValueError("the stack has no blocks: nothing to explain")
    real = sum(p.numel() for p in stack.parameters())
    stack = meta_copy(stack)  # the caller's stack is never traced, so never changed
    first = stack.blocks[0]
    L, d = ("Lt" if decoder else "L"), first.mhsa.dim
    env = {L: seq_len, "D": d, "H": first.mhsa.heads, "Dh": first.mhsa.head_dim}
    env["F"] = first.mlp.fc2.in_features
    kwargs: dict[str, Tensor | bool] = {"need_weights": forms_weights(stack)}
    with size_guard("the example input"):
        x = torch.empty(batch_size, seq_len, d, device="meta")
        if decoder:
            env["Ls"] = memory_len
            kwargs["memory"] = torch.empty(batch_size, memory_len, d, device="meta")
    ex = Explainer(trace(stack, (x,), kwargs), env, blocks)
    kind = "decoder" if decoder else ("causal encoder" if stack.causal else "encoder")
    lengths = f"Lt = {seq_len} target, Ls = {memory_len} source tokens"
    norm = "pre" if first.norm_first else "post"
    header = [
        f"TransformerStack ({kind}), batch size {batch_size}",
        f"D = {d}, {len(stack.blocks)} blocks ({norm}-norm), H = {env['H']} heads of "
        f"Dh = {env['Dh']}, F = ffn_dim = {env['F']}, "
        + (lengths if decoder else f"L = {seq_len} tokens"),
    ]
    config = {"kind": stack.kind, "causal": stack.causal, "depth": len(stack.blocks), **env}
    rows = stack_rows(ex, stack, L, "Ls" if decoder else None)
    return _table(stack, real, ex, rows, name=f"TransformerStack ({kind})", family="",
                  config=config, batch_size=batch_size, header=header,
                  sample="sequence")  # fmt: skip
