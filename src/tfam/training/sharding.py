"""The distributed weight handling: whole weights and optimiser state out of, and into, a model
that DDP or FSDP trains (:mod:`tfam.training.distributed` wraps it).

DDP keeps a whole copy of the weights on every process, so the plain ``state_dict`` /
``load_state_dict`` of the unwrapped model are whole. FSDP shards them: reading or writing whole
weights is a collective (every rank must call it) through ``torch.distributed.checkpoint``.
``sharded`` below says which case a run is in (``fsdp=True`` with more than one process); the
trainer computes it once (``Trainer._sharded``) and nothing else in it branches on FSDP except
the choice of module for evaluation (FSDP gathers weights inside forward).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn


def full_state(
    model: nn.Module, optimizer: Any, sharded: bool
) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """The model's whole weights and the optimiser's whole state (a collective when sharded,
    offloaded to the CPU then)."""
    if sharded:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_state_dict(model, optimizer, options=options)
    return model.state_dict(), optimizer.state_dict()


def full_model_weights(model: nn.Module, sharded: bool) -> dict[str, Tensor]:
    """A CPU copy of the model's whole weights, the same on every process (a collective when
    sharded)."""
    if sharded:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        weights = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    else:
        weights = model.state_dict()
    return {k: v.detach().to("cpu", copy=True) for k, v in weights.items()}


def load_full_model_weights(model: nn.Module, weights: dict[str, Tensor], sharded: bool) -> None:
    """Copy whole weights (from :func:`full_model_weights`) into the model, on every process."""
    if sharded:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
        )

        set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True))
    else:
        model.load_state_dict(weights)


def load_full_state(
    model: nn.Module,
    optimizer: Any,
    weights: dict[str, Tensor],
    optimizer_state: dict[str, Any],
    sharded: bool,
) -> None:
    """Restore whole weights and optimiser state (from :func:`full_state`), on every process."""
    if sharded:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        set_state_dict(
            model,
            optimizer,
            model_state_dict=weights,
            optim_state_dict=optimizer_state,
            options=StateDictOptions(full_state_dict=True),
        )
    else:
        model.load_state_dict(weights)
        optimizer.load_state_dict(optimizer_state)


def plain_model(model: nn.Module, full_weights: dict[str, Tensor] | None) -> nn.Module:
    """The model with whole (unsharded) weights: ``model`` itself, or (FSDP, rank 0) a fresh
    model of its class and config holding ``full_weights``."""
    if full_weights is None:
        return model
    plain = type(model)(model.config)  # type: ignore[call-arg]
    plain.load_state_dict(full_weights)
    return plain
