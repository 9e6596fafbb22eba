"""Config dataclasses: a model is fully described by its config, which round-trips through JSON.

Every config validates itself at construction; a wrong value raises ``ValueError`` naming the
field, the value and what would be valid.

This module imports nothing of tfam. Each family's config subclasses :class:`BaseConfig` in the
family's own file (``ViTConfig`` in ``tfam/models/vit.py``) and registers itself by its
``family`` name. Bricks that a config names by string register themselves here too: attention
kernels fill :data:`ATTENTION_KERNELS` and position schemes :data:`POSITION_SCHEMES` when
``tfam.layers`` is imported, so a config can check ``attention``, ``attention_options`` and
``position`` without importing a brick.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Protocol

ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "quick_gelu", "silu", "swiglu", "geglu")
# "batchnorm" normalises each feature over the batch's tokens (tfam.layers.norm.TokenBatchNorm).
NORMS = ("layernorm", "rmsnorm", "batchnorm", "none")
POOLS = ("cls", "mean")
# How a position scheme acts: added to the tokens, rotating Q and K, a bias on the scores, or not
# at all; and what it indexes: a 1-D sequence, a 2-D patch grid, or either.
POSITION_ACTS = ("tokens", "qk", "scores", "none")
POSITION_DOMAINS = ("sequence", "grid", "any")


class OptionsValidator(Protocol):
    """What a config needs from a kernel: turn its options into a checked, JSON-ready dict."""

    @classmethod
    def validate_options(cls, options: dict[str, Any]) -> dict[str, Any]: ...


# Attention kernel name -> kernel class (filled by tfam.layers.kernels).
ATTENTION_KERNELS: dict[str, type[OptionsValidator]] = {}


class PositionInfo(Protocol):
    """What a config needs from a position scheme: how it acts and what it indexes."""

    acts: str  # one of POSITION_ACTS
    domain: str  # one of POSITION_DOMAINS
    bounds_length: bool  # a table of max_positions rows: no sequence longer than it

    @classmethod
    def check_config(cls, config: Any) -> None: ...


# Position scheme name -> scheme class (filled by tfam.layers.position), in registration order.
POSITION_SCHEMES: dict[str, type[PositionInfo]] = {}


def config_error(field_name: str, value: Any, valid: str) -> ValueError:
    """The one error format for bad settings: field, value, what is valid."""
    return ValueError(f"{field_name}={value!r} is invalid: {valid}")


def check_choice(field_name: str, value: Any, choices: Iterable[str]) -> None:
    choices = tuple(choices)
    if value not in choices:
        raise config_error(field_name, value, f"expected one of {', '.join(map(repr, choices))}")


def check_positive_int(field_name: str, value: Any, allow_zero: bool = False) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool)
    if not ok or value < 0 or (value == 0 and not allow_zero):
        raise config_error(
            field_name,
            value,
            "expected a non-negative int" if allow_zero else "expected a positive int",
        )


def check_bool(field_name: str, value: Any) -> None:
    # JSON written by hand may say "false"; a non-empty string is truthy, so refuse it.
    if not isinstance(value, bool):
        raise config_error(field_name, value, "expected true or false (a bool)")


def check_probability(field_name: str, value: Any) -> None:
    if not isinstance(value, int | float) or not 0.0 <= float(value) < 1.0:
        raise config_error(field_name, value, "expected a float in [0, 1)")


def divisors(n: int, limit: int = 12) -> list[int]:
    """The first ``limit`` divisors of n in increasing order, found in O(sqrt(n)) steps."""
    small, large = [], []
    i = 1
    while i * i <= n and len(small) < limit:
        if n % i == 0:
            small.append(i)
            if i != n // i:
                large.append(n // i)
        i += 1
    return sorted(small + large)[:limit]


def as_pair(field_name: str, value: Any) -> tuple[int, int]:
    """An int or a (height, width) pair -> (height, width), validated positive."""
    if isinstance(value, int) and not isinstance(value, bool):
        pair = (value, value)
    elif isinstance(value, list | tuple) and len(value) == 2:
        pair = (value[0], value[1])
    else:
        raise config_error(field_name, value, "expected an int or a (height, width) pair of ints")
    for v in pair:
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise config_error(field_name, value, "expected positive ints")
    return pair


_CONFIG_CLASSES: dict[str, type[BaseConfig]] = {}


@dataclass
class BaseConfig:
    """Fields shared by every family; a family subclasses this and adds its own.

    Bricks (attention, feed-forward, blocks, stacks) are built from a config: any family's
    config, or a plain ``BaseConfig(dim=..., heads=...)`` in tests and small compositions.

    The ``position`` values a family takes follow from the registered schemes
    (:data:`POSITION_SCHEMES`): those whose action is in ``position_acts`` and whose domain is
    in ``position_domains`` (see :meth:`position_names`); a family with one fixed layout lists
    its names in ``positions`` instead.
    """

    family: ClassVar[str] = ""
    position_acts: ClassVar[tuple[str, ...]] = POSITION_ACTS
    position_domains: ClassVar[tuple[str, ...]] = POSITION_DOMAINS
    positions: ClassVar[tuple[str, ...] | None] = None  # an explicit list overrides the above

    dim: int = 768
    depth: int = 12
    heads: int = 12
    ffn_dim: int | None = None  # None -> 4 * dim
    activation: str = "gelu"
    norm: str = "layernorm"
    norm_eps: float = 1e-6
    norm_first: bool = True
    dropout: float = 0.0
    attn_dropout: float = 0.0
    drop_path: float = 0.0
    attention: str = "sdpa"
    attention_options: dict[str, Any] = field(default_factory=dict)
    position: str = "learned"
    qkv_bias: bool = True
    fused_qkv: bool = True
    init_std: float = 0.02
    # ALBERT's cross-layer sharing (Lan et al. 2020): one block's weights used at every depth.
    share_layers: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.family:
            _CONFIG_CLASSES[cls.family] = cls

    def __post_init__(self) -> None:
        check_positive_int("dim", self.dim)
        check_positive_int("depth", self.depth, allow_zero=True)
        check_positive_int("heads", self.heads)
        if self.dim % self.heads:
            raise config_error(
                "heads",
                self.heads,
                f"dim={self.dim} must be divisible by heads; valid head counts: "
                f"{divisors(self.dim)}",
            )
        if self.ffn_dim is None:
            self.ffn_dim = 4 * self.dim
        check_positive_int("ffn_dim", self.ffn_dim)
        check_choice("activation", self.activation, ACTIVATIONS)
        check_choice("norm", self.norm, NORMS)
        if not isinstance(self.norm_eps, int | float) or not 0 < self.norm_eps < 1:
            raise config_error("norm_eps", self.norm_eps, "expected a float in (0, 1)")
        for name in ("dropout", "attn_dropout", "drop_path"):
            check_probability(name, getattr(self, name))
        self.attention_options = check_attention(self.attention, self.attention_options)
        check_choice("position", self.position, self.position_names())
        POSITION_SCHEMES[self.position].check_config(self)
        check_attention_position(self.attention, self.position)
        for name in ("norm_first", "qkv_bias", "fused_qkv", "share_layers"):
            check_bool(name, getattr(self, name))
        if not isinstance(self.init_std, int | float) or self.init_std <= 0:
            raise config_error("init_std", self.init_std, "expected a positive float")

    @classmethod
    def position_names(cls) -> tuple[str, ...]:
        """The ``position`` values this config takes, in registration order."""
        if not POSITION_SCHEMES:
            raise RuntimeError("no position scheme is registered: import tfam (or tfam.layers)")
        return tuple(
            name
            for name, scheme in POSITION_SCHEMES.items()
            if (cls.positions is None or name in cls.positions)
            and scheme.acts in cls.position_acts
            and scheme.domain in cls.position_domains
        )

    def check_length(self, length: int, what: str = "the sequence") -> None:
        """Refuse ``length`` tokens past ``max_positions`` in one ``ValueError`` line naming
        it, when the position scheme is a table of that many rows (``bounds_length``: a
        learned sequence table). Every other scheme computes its positions for any length
        (sinusoids, rotations, biases), so it runs past the training length; a config without
        ``max_positions`` (ViT) has no bound."""
        limit = getattr(self, "max_positions", None)
        scheme = POSITION_SCHEMES.get(self.position)
        if limit is None or length <= limit or not getattr(scheme, "bounds_length", False):
            return
        raise ValueError(
            f"{what} of {length} tokens is longer than max_positions={limit}, which bounds "
            f"position={self.position!r} (a table of {limit} rows; other schemes run past it)"
        )

    @property
    def head_dim(self) -> int:
        """Dh = D / H."""
        return self.dim // self.heads

    def to_dict(self) -> dict[str, Any]:
        d = {"family": self.family}
        for f in fields(self):
            v = getattr(self, f.name)
            d[f.name] = list(v) if isinstance(v, tuple) else dict(v) if isinstance(v, dict) else v
        return d

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def replace(self, **changes: Any) -> BaseConfig:
        """A validated copy with some fields changed (unknown names raise ValueError)."""
        check_fields(type(self), changes)
        if "attention" in changes and "attention_options" not in changes:
            # Options belong to a kernel: another kernel starts from its own defaults.
            if changes["attention"] != self.attention:
                changes = {**changes, "attention_options": {}}
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BaseConfig:
        d = dict(d)
        family = d.pop("family", cls.family)
        target = cls if cls.family == family else config_class(family)
        check_fields(target, d)
        return target(**d)

    @classmethod
    def from_json(cls, text_or_path: str | Path) -> BaseConfig:
        text = str(text_or_path)
        if not text.lstrip().startswith("{"):
            text = Path(text_or_path).read_text()
        return cls.from_dict(json.loads(text))


def check_fields(cls: type[BaseConfig], values: dict[str, Any]) -> None:
    """Unknown field names are an error that lists the valid ones."""
    names = {f.name for f in fields(cls)}
    for key in values:
        if key not in names:
            raise ValueError(
                f"{key!r} is not a field of {cls.__name__} (family {cls.family!r}); "
                f"valid fields: {', '.join(sorted(names))}"
            )


def check_attention(name: Any, options: Any) -> dict[str, Any]:
    """Validate a kernel name and its options against the registered kernels; returns the
    options as the kernel normalises them (JSON-ready)."""
    if not ATTENTION_KERNELS:
        raise RuntimeError("no attention kernel is registered: import tfam (or tfam.layers) first")
    check_choice("attention", name, sorted(ATTENTION_KERNELS))
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise config_error("attention_options", options, "expected a dict (a JSON object)")
    return ATTENTION_KERNELS[name].validate_options(options)


def check_attention_position(attention: str, position: str) -> None:
    """A position scheme that adds a bias to the scores (ALiBi, T5's relative bias) needs a
    kernel that takes one: otherwise one ValueError line from the kernel's declaration, naming
    both (``Kernel.refusal``), when the config is built, not at the first forward."""
    scheme, kernel = POSITION_SCHEMES.get(position), ATTENTION_KERNELS.get(attention)
    if scheme is None or kernel is None or scheme.acts != "scores":
        return
    refusal = kernel.refusal("bias")
    if refusal:
        raise ValueError(f"position={position!r} adds a bias to every score, but {refusal}")


def config_class(family: str) -> type[BaseConfig]:
    """The config class registered for a family (families register when tfam is imported)."""
    if family not in _CONFIG_CLASSES:
        raise config_error("family", family, f"expected one of {sorted(_CONFIG_CLASSES)}")
    return _CONFIG_CLASSES[family]


__all__ = [
    "ATTENTION_KERNELS",
    "POSITION_ACTS",
    "POSITION_DOMAINS",
    "POSITION_SCHEMES",
    "BaseConfig",
    "as_pair",
    "check_attention",
    "check_attention_position",
    "check_bool",
    "check_choice",
    "check_fields",
    "check_positive_int",
    "check_probability",
    "config_class",
    "config_error",
    "divisors",
]
