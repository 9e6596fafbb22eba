"""What every family shares: its config, initialisation, saving and loading."""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, overload

import torch
from torch import Tensor, nn

from tfam.config import BaseConfig, check_attention, check_attention_position
from tfam.fileio import atomic_write_bytes
from tfam.layers.attention import MultiHeadAttention
from tfam.layers.kernels import AttentionKernel

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
MODEL_CLASSES: dict[str, type[TfamModel]] = {}


class AttentionWeights(Sequence[Tensor]):
    """What ``model(..., return_attention=True)`` returns next to its output, in every family.

    A sequence of per-block attention maps (B, H, Lq, Lk), rows = queries, of the main stack
    (the stack whose output the head reads: ViT's and BERT's ``"encoder"``, GPT's
    ``"decoder"``, the encoder–decoder's ``"decoder"`` self-attention), and named groups, each a
    tuple of such maps: ``weights["encoder"]``, ``weights["decoder"]``, ``weights["cross"]``
    (the decoder's queries over the source, (B, H, Lt, Ls)). ``weights.main`` names the main
    group and ``weights.groups`` every group. The maps are whatever the kernel returned, in the
    model's dtype, whatever kernel the model normally runs.
    """

    def __init__(self, main: str, **groups: Iterable[Tensor]) -> None:
        if main not in groups:
            raise ValueError(f"main={main!r} is invalid: expected one of {sorted(groups)}")
        self.main = main
        self._groups = {name: tuple(maps) for name, maps in groups.items()}

    @property
    def groups(self) -> tuple[str, ...]:
        """The group names, main first."""
        return (self.main, *(g for g in self._groups if g != self.main))

    @overload
    def __getitem__(self, index: int) -> Tensor: ...
    @overload
    def __getitem__(self, index: str) -> tuple[Tensor, ...]: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Tensor, ...]: ...
    def __getitem__(self, index: int | str | slice) -> Tensor | tuple[Tensor, ...]:
        """An int or slice indexes the main stack's blocks; a name gives that group."""
        if isinstance(index, str):
            if index not in self._groups:
                raise KeyError(
                    f"{index!r}: these attention weights hold the groups {list(self.groups)}"
                )
            return self._groups[index]
        return self._groups[self.main][index]

    def __len__(self) -> int:
        return len(self._groups[self.main])

    def __iter__(self) -> Iterator[Tensor]:
        return iter(self._groups[self.main])

    def __contains__(self, item: object) -> bool:
        if isinstance(item, str):
            return item in self._groups
        return any(item is t for t in self._groups[self.main])

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{g}={len(self._groups[g])}x{tuple(self._groups[g][0].shape) if self._groups[g] else ()}"
            for g in self.groups
        )
        return f"AttentionWeights(main={self.main!r}, {parts})"


# What a family's forward can read (``TfamModel.inputs``): the commands pick their path by it.
INPUT_KINDS = ("image", "tokens", "token-pairs", "audio", "graph")


class TfamModel(nn.Module, ABC):
    """Base of every family: ``model.config``, ``save_pretrained``, ``from_pretrained``."""

    config_class: ClassVar[type[BaseConfig]]
    # What the family declares; the command line and interop ask these, never its name.
    # How messages name the family ("ViT", "BERT").
    title: ClassVar[str] = ""
    # What forward reads, one of INPUT_KINDS: "image" (pixels (B, C, H, W)), "tokens" (ids
    # (B, L)), "token-pairs" (source ids (B, Ls) and target ids (B, Lt): an encoder–decoder),
    # "audio" (log-mel frames (B, T, n_mels) and a mask) or "graph" (node features (B, N, F),
    # an edge list and a node mask).
    inputs: ClassVar[str] = ""
    # The trainer's tasks (tfam.training.tasks names) this family can be trained on.
    tasks: ClassVar[tuple[str, ...]] = ()
    # What the head computes, by the config's ``head`` value, for a model whose run says
    # nothing else (a family with one task computes that one: see ``head_task``).
    head_tasks: ClassVar[dict[str, str]] = {}
    # Whether ``generate`` continues a sequence (greedy, sampling, beam search).
    generates: ClassVar[bool] = False
    # Whether its tokens are an image's palette ids in raster order (iGPT: a palette.json
    # beside the run): `tfam generate` then completes held-out images instead of text.
    image_tokens: ClassVar[bool] = False
    # Whether mean-pooled ``forward_features`` are sentence embeddings (`tfam embed`).
    embeds: ClassVar[bool] = False
    # How ``return_attention``'s maps are laid out: "tokens", (B, H, Lq, Lk) per block; or
    # "windows", (B * nW, H_block, Ws^2, Ws^2) per block, each window's own attention (Swin:
    # windows of one image contiguous; the heads are the block's, which differ per stage).
    attention_layout: ClassVar[str] = "tokens"
    # Whether the family has attention layers (``return_attention``, ``set_attention``, the
    # position schemes); a CNN does not.
    attends: ClassVar[bool] = True
    # Its Hugging Face converters (tfam.interop.registry.Converter): they add themselves here
    # when they register (importing tfam imports them all).
    converters: ClassVar[tuple[Any, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.converters = ()  # a subclass is another family: it does not inherit converters
        if getattr(cls, "config_class", None) is not None:
            MODEL_CLASSES[cls.config_class.family] = cls

    @classmethod
    def small_overrides(cls, config: BaseConfig, depth: int = 2) -> dict[str, Any]:
        """Config overrides that shrink ``config`` to a small model of the same family and
        options (the contract tests build one from each preset): at most ``depth`` blocks,
        D = 8 per head, the default MLP width. A family whose width and depth follow from
        other fields (a CNN's stages) overrides this."""
        return {"depth": min(config.depth, depth), "dim": 8 * config.heads, "ffn_dim": None}

    @classmethod
    def head_task(cls, config: BaseConfig) -> str:
        """The task ``config``'s head computes ("" when the family cannot tell)."""
        if cls.head_tasks:
            return cls.head_tasks.get(str(getattr(config, "head", "")), "")
        return cls.tasks[0] if len(cls.tasks) == 1 else ""

    def __init__(self, config: BaseConfig) -> None:
        super().__init__()
        if not isinstance(config, self.config_class):
            raise TypeError(
                f"{type(self).__name__} takes a {self.config_class.__name__}, got {config!r}"
            )
        self.config = config

    @property
    def feature_dim(self) -> int:
        """The width of :meth:`forward_features`' last axis: D, unless the family's features
        are wider (a hierarchical model's last stage)."""
        return self.config.dim

    def init_weights(self) -> None:
        """Truncated-normal (std = config.init_std) linear and patch weights, zero biases,
        unit norms. Each layer draws its own values from the caller's RNG."""
        std = self.config.init_std
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Conv2d):
                nn.init.trunc_normal_(module.weight, std=std, a=-2 * std, b=2 * std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm | nn.RMSNorm | nn.BatchNorm1d):
                if module.weight is not None:
                    nn.init.ones_(module.weight)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, AttentionKernel):  # its own parameters, if any (additive)
                module.reset_parameters(std)

    def no_weight_decay(self) -> set[str]:
        """Names of parameters that weight decay must leave alone (besides norms and biases)."""
        return set()

    def num_parameters(self, trainable_only: bool = False) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)

    def set_attention(
        self, attention: str, options: dict[str, Any] | None = None, discard: bool = False
    ) -> None:
        """Switch every attention layer to another kernel (same weights). A kernel's own
        learned parameters (``math``, ``score='additive'``) are kept where the new kernel has
        the same; dropping them is a ValueError unless ``discard=True``
        (:meth:`MultiHeadAttention.set_kernel`)."""
        options = check_attention(attention, options)
        check_attention_position(attention, self.config.position)
        # Every layer holds the same kernel, so a refusal comes from the first, before any
        # layer has switched.
        for m in self.modules():
            if isinstance(m, MultiHeadAttention):
                m.set_kernel(attention, options, discard)
        self.config.attention = attention
        self.config.attention_options = options

    def adapt_state_dict(
        self, state: dict[str, torch.Tensor], saved: BaseConfig
    ) -> dict[str, torch.Tensor]:
        """Hook for loading weights saved under another config (e.g. another image size)."""
        return state

    def tied_aliases(self) -> dict[str, str]:
        """State-dict names that share their tensor with an earlier name (tied embeddings):
        alias -> the name that is saved."""
        first: dict[tuple[int, tuple[int, ...]], str] = {}
        aliases = {}
        for name, t in self.state_dict(keep_vars=True).items():
            key = (t.data_ptr(), tuple(t.shape))
            if t.device.type != "meta" and key in first:
                aliases[name] = first[key]
            else:
                first.setdefault(key, name)
        return aliases

    @abstractmethod
    def forward_features(self, *inputs: Any, **options: Any) -> Any:
        """The family's inputs -> the features its head reads; with ``return_attention=True``
        a pair (features, :class:`AttentionWeights`)."""

    @abstractmethod
    def forward_head(self, features: Tensor) -> Tensor:
        """The features of :meth:`forward_features` -> the family's output."""

    def forward(self, *inputs: Any, **options: Any) -> Tensor | tuple[Tensor, AttentionWeights]:
        """``forward_head(forward_features(...))``, with the arguments of the family's
        :meth:`forward_features`; with ``return_attention=True`` also its
        :class:`AttentionWeights`. Written once here, so every family keeps that contract; a
        family overrides it only for a faster path to the same output (ViT's [CLS])."""
        features = self.forward_features(*inputs, **options)
        if isinstance(features, tuple):  # asked for the weights
            hidden, weights = features
            return self.forward_head(hidden), weights
        return self.forward_head(features)

    @abstractmethod
    def example_inputs(self, batch_size: int = 2) -> tuple[torch.Tensor, ...]:
        """Random inputs of the right shape for ``forward`` (contract tests, explain, bench)."""

    def save_pretrained(self, directory: str | Path) -> Path:
        """Write ``config.json`` and ``model.safetensors`` into ``directory``, each atomically
        (temp file, fsync, rename). The weights carry a SHA-256 of their tensors, checked by
        :func:`from_pretrained`."""
        from safetensors.torch import save

        directory = Path(directory)
        aliases = self.tied_aliases()
        state = {
            k: v.detach().contiguous().cpu()
            for k, v in self.state_dict().items()
            if k not in aliases
        }
        metadata = {
            "format": "pt",
            "family": self.config.family,
            "tfam_sha256": tensors_sha256(state),
        }
        atomic_write_bytes(directory / WEIGHTS_NAME, save(state, metadata=metadata))
        atomic_write_bytes(directory / CONFIG_NAME, (self.config.to_json() + "\n").encode())
        return directory


def tensors_sha256(state: dict[str, torch.Tensor]) -> str:
    """SHA-256 over names, dtypes, shapes and bytes of a state dict, in name order."""
    digest = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().contiguous().cpu()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _read_config(path: Path) -> BaseConfig:
    try:
        data = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(
            f"{path} is not valid JSON ({err}); it should hold a model config"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(
            f"{path} holds a JSON {type(data).__name__}, not an object of config fields"
        )
    try:
        return BaseConfig.from_dict(data)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{path}: {err}") from None


def _read_weights(path: Path, map_location: str) -> dict[str, torch.Tensor]:
    from safetensors import safe_open
    from safetensors.torch import load_file

    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
        state = load_file(str(path), device="cpu")
    except Exception as err:  # safetensors raises its own error types for damaged files
        raise ValueError(
            f"{path} cannot be read as safetensors ({type(err).__name__}: {err}); the file is "
            "damaged or truncated: save the model again or restore it from a copy"
        ) from None
    expected = metadata.get("tfam_sha256")
    if expected is not None and tensors_sha256(state) != expected:
        raise ValueError(
            f"{path} fails its checksum: the weights changed on disk after they were saved "
            "(a damaged file); save the model again or restore it from a copy"
        )
    return {k: v.to(map_location) for k, v in state.items()} if map_location != "cpu" else state


def from_pretrained(
    directory: str | Path, map_location: str = "cpu", **overrides: Any
) -> TfamModel:
    """Load a model written by ``save_pretrained``; the weights' checksum is verified. Config
    fields may be overridden (e.g. ``image_size=384`` resamples the learned position table,
    ``attention='math'``)."""
    directory = Path(directory)
    config_path = directory / CONFIG_NAME
    weights_path = directory / WEIGHTS_NAME
    for path in (config_path, weights_path):
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} not found: a model directory holds {CONFIG_NAME} and {WEIGHTS_NAME} "
                "(written by model.save_pretrained or `tfam train`)"
            )
    saved = _read_config(config_path)
    config = saved.replace(**overrides) if overrides else saved
    model = MODEL_CLASSES[config.family](config)
    state = model.adapt_state_dict(_read_weights(weights_path, map_location), saved)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
        untied = sorted(set(missing) - set(model.tied_aliases()))
        if untied or unexpected:
            raise RuntimeError(
                f"missing keys {untied[:5]}, unexpected keys {sorted(unexpected)[:5]}"
            )
    except RuntimeError as err:
        detail = " ".join(str(err).split())
        raise ValueError(f"{config_path} disagrees with {weights_path}: {detail[:400]}") from None
    return model.to(map_location).eval()
