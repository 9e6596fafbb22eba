"""Config dataclasses: a model is fully described by its config, which round-trips through JSON.

Every config validates itself at construction; a wrong value raises ``ValueError`` naming the
field, the value and what would be valid.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu")
NORMS = ("layernorm", "rmsnorm")
POOLS = ("cls", "mean")
VIT_POSITIONS = ("learned", "sincos2d", "none")


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
    """Fields shared by every family; a family subclasses this and adds its own."""

    family: ClassVar[str] = ""

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
    qkv_bias: bool = True
    fused_qkv: bool = True
    init_std: float = 0.02

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.family:
            _CONFIG_CLASSES[cls.family] = cls

    def __post_init__(self) -> None:
        from tfam.layers.kernels import KERNELS  # late import: layers import config helpers

        check_positive_int("dim", self.dim)
        check_positive_int("depth", self.depth, allow_zero=True)
        check_positive_int("heads", self.heads)
        if self.dim % self.heads:
            divisors = [h for h in range(1, self.dim + 1) if self.dim % h == 0]
            raise config_error(
                "heads",
                self.heads,
                f"dim={self.dim} must be divisible by heads; valid head counts: {divisors[:12]}",
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
        check_choice("attention", self.attention, sorted(KERNELS))
        for name in ("norm_first", "qkv_bias", "fused_qkv"):
            check_bool(name, getattr(self, name))
        if not isinstance(self.init_std, int | float) or self.init_std <= 0:
            raise config_error("init_std", self.init_std, "expected a positive float")

    @property
    def head_dim(self) -> int:
        """Dh = D / H."""
        return self.dim // self.heads

    def to_dict(self) -> dict[str, Any]:
        d = {"family": self.family}
        for f in fields(self):
            v = getattr(self, f.name)
            d[f.name] = list(v) if isinstance(v, tuple) else v
        return d

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def replace(self, **changes: Any) -> BaseConfig:
        """A validated copy with some fields changed (unknown names raise ValueError)."""
        check_fields(type(self), changes)
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


def config_class(family: str) -> type[BaseConfig]:
    import tfam.models  # noqa: F401  (registers every family's config)

    if family not in _CONFIG_CLASSES:
        raise config_error("family", family, f"expected one of {sorted(_CONFIG_CLASSES)}")
    return _CONFIG_CLASSES[family]


@dataclass
class ViTConfig(BaseConfig):
    """Vision Transformer: patches -> linear projection -> [CLS] + position -> N blocks -> head.

    ``patch_dim`` (P_h * P_w * C, the flattened patch) follows from ``patch_size`` and
    ``in_channels``; the embedding width ``dim`` (D) is set independently.
    """

    family: ClassVar[str] = "vit"

    image_size: Any = 224  # int or (height, width)
    patch_size: Any = 16  # int or (height, width)
    in_channels: int = 3
    num_classes: int = 1000  # 0 -> no head, forward returns pooled features
    pool: str = "cls"
    class_token: bool = True
    position: str = "learned"  # "learned" table, fixed "sincos2d" on the patch grid, or "none"
    pos_init_std: float = 0.02
    representation_size: int | None = None  # optional pre-logits Linear + tanh (ViT paper)
    final_norm: bool | None = None  # None -> True with pre-norm blocks, False with post-norm
    norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        super().__post_init__()
        self.image_size = as_pair("image_size", self.image_size)
        self.patch_size = as_pair("patch_size", self.patch_size)
        for axis, (img, p) in enumerate(zip(self.image_size, self.patch_size, strict=True)):
            if img % p:
                which = ("height", "width")[axis]
                valid = [d for d in range(1, img + 1) if img % d == 0]
                raise config_error(
                    "patch_size",
                    self.patch_size if self.patch_size[0] != self.patch_size[1] else p,
                    f"the image {which} {img} is not divisible by the patch {which} {p}; "
                    f"patch {which}s that divide it: {valid}",
                )
        check_positive_int("in_channels", self.in_channels)
        check_positive_int("num_classes", self.num_classes, allow_zero=True)
        check_choice("pool", self.pool, POOLS)
        check_choice("position", self.position, VIT_POSITIONS)
        if self.position == "sincos2d" and self.dim % 4:
            raise config_error(
                "dim",
                self.dim,
                "position='sincos2d' splits dim into sine and cosine halves for rows and "
                "columns, so dim must be divisible by 4",
            )
        check_bool("class_token", self.class_token)
        if self.pool == "cls" and not self.class_token:
            raise config_error(
                "pool", self.pool, "pool='cls' needs class_token=True; use pool='mean'"
            )
        if self.representation_size is not None:
            check_positive_int("representation_size", self.representation_size)
        if self.final_norm is None:
            self.final_norm = bool(self.norm_first)
        check_bool("final_norm", self.final_norm)

    @property
    def grid_size(self) -> tuple[int, int]:
        return (self.image_size[0] // self.patch_size[0], self.image_size[1] // self.patch_size[1])

    @property
    def num_patches(self) -> int:
        gh, gw = self.grid_size
        return gh * gw

    @property
    def patch_dim(self) -> int:
        """P_h * P_w * C: the length of one flattened patch."""
        return self.patch_size[0] * self.patch_size[1] * self.in_channels


__all__ = ["BaseConfig", "ViTConfig", "config_class", "config_error", "field"]
