"""Several processes with PyTorch's own engine: torchrun, DDP, FSDP.

Run ``torchrun --nproc_per_node N -m tfam train ...`` (or :func:`launch`): each process reads
``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` from its environment, joins the process group (gloo
on the CPU, NCCL on CUDA) and the trainer wraps its model in DDP (or FSDP with ``fsdp=True``).

Data order. Every rank draws the same permutation of the training set; ``batch_size`` is the
*global* batch, and rank r takes its contiguous share ``idx.tensor_split(world)[r]`` of each
global batch. So the global data order, and the mean loss of each optimiser step, are those of
one process with the same ``batch_size`` (up to floating-point rounding).

Faults. The process group has a timeout (``dist_timeout``): a collective that waits longer on
a rank that is gone raises instead of hanging; and torchrun stops every worker of the group
as soon as one exits with an error or is killed, so the job exits non-zero.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

__all__ = [
    "DistInfo",
    "all_gather_object",
    "all_reduce_sums",
    "backend_for",
    "barrier",
    "check_launch",
    "broadcast_object",
    "dist_info",
    "init_distributed",
    "launch",
    "launch_command",
    "processes_text",
    "shard",
    "wrap_model",
]


@dataclass(frozen=True)
class DistInfo:
    """Where this process stands: its rank among ``world_size`` processes."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment {name}={value!r} is invalid: expected an int") from None


def dist_info() -> DistInfo:
    """This process's rank and world size: from the process group when it is up, else from
    torchrun's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), else a single process."""
    if dist.is_available() and dist.is_initialized():
        return DistInfo(dist.get_rank(), dist.get_world_size(), _env_int("LOCAL_RANK", 0))
    world = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    if world < 1 or not 0 <= rank < world:
        raise ValueError(
            f"environment RANK={rank} WORLD_SIZE={world} is invalid: expected 0 <= RANK < "
            "WORLD_SIZE"
        )
    return DistInfo(rank, world, _env_int("LOCAL_RANK", 0))


def init_distributed(device: torch.device, timeout_s: float = 600.0) -> DistInfo:
    """Join the process group when launched by torchrun with WORLD_SIZE > 1 (once per
    process); a single process is left alone. gloo on the CPU, NCCL on CUDA."""
    info = dist_info()
    if not info.enabled or dist.is_initialized():
        return info
    if not dist.is_available():
        raise ValueError(
            f"WORLD_SIZE={info.world_size} is invalid here: this torch build has no "
            "torch.distributed"
        )
    backend = backend_for(device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    kwargs: dict[str, Any] = {}
    if device.type == "cuda":
        kwargs["device_id"] = device
    dist.init_process_group(
        backend=backend, timeout=datetime.timedelta(seconds=float(timeout_s)), **kwargs
    )
    return dist_info()


def backend_for(device: torch.device) -> str:
    """The process group's backend for ``device``: NCCL on CUDA, gloo on the CPU."""
    return "nccl" if device.type == "cuda" else "gloo"


def check_launch(nproc: int, device: str = "auto") -> str:
    """Check, before torchrun starts anything, that ``nproc`` local processes can run on
    ``device`` (auto, cpu, cuda, cuda:N, mps) and return their backend ("gloo" or "nccl"):
    a one-line ValueError naming ``--device`` or ``--nproc`` otherwise (torchrun would report
    a worker's failure in ~50 lines ending in ChildFailedError)."""
    from tfam.training.devices import resolve_device

    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise ValueError(f"--nproc {nproc!r} is invalid: expected an int >= 1")
    try:
        resolved = resolve_device(device, local_rank=0)
    except ValueError as err:
        reason = str(err).removeprefix(f"device={device!r} is invalid: ")
        raise ValueError(f"--device {device!r} is invalid (--nproc {nproc}): {reason}") from None
    if resolved.type == "mps":
        raise ValueError(
            f"--device {device!r} is invalid (--nproc {nproc}): torchrun runs on cpu or cuda "
            "(one Apple GPU cannot be shared by several processes)"
        )
    if resolved.type == "cuda":
        count = torch.cuda.device_count()
        if ":" in str(device):
            raise ValueError(
                f"--device {device!r} is invalid (--nproc {nproc}): each process takes the GPU "
                "of its local rank; give --device cuda"
            )
        if nproc > count:
            raise ValueError(
                f"--nproc {nproc} is invalid with --device {device!r}: this machine has {count} "
                "CUDA device(s), one per process"
            )
    backend = backend_for(resolved)
    if not dist.is_available():
        raise ValueError(f"--nproc {nproc} is invalid: this torch build has no torch.distributed")
    available = dist.is_nccl_available() if backend == "nccl" else dist.is_gloo_available()
    if not available:
        raise ValueError(
            f"--nproc {nproc} is invalid on {resolved.type}: this torch build has no {backend} "
            "backend"
        )
    return backend


def processes_text(threads: int, info: DistInfo | None = None, device: str = "auto") -> str:
    """How a run computes, for its header: "1 thread", "4 threads", or under torchrun
    "2 processes (gloo), 1 thread each" (the backend that ``device`` gets)."""
    each = f"{threads} thread{'s' if threads != 1 else ''}"
    info = dist_info() if info is None else info
    if not info.enabled:
        return each
    from tfam.training.devices import resolve_device

    backend = backend_for(resolve_device(device, local_rank=info.local_rank))
    return f"{info.world_size} processes ({backend}), {each} each"


def shard(indices: Tensor, info: DistInfo) -> Tensor:
    """This rank's contiguous share of a global batch of indices."""
    if not info.enabled:
        return indices
    return indices.tensor_split(info.world_size)[info.rank]


def all_reduce_sums(
    sums: dict[str, float], info: DistInfo, device: torch.device
) -> dict[str, float]:
    """Sum a dict of numbers over all ranks (float64; the keys must agree on every rank)."""
    if not info.enabled:
        return dict(sums)
    keys = sorted(sums)
    values = torch.tensor([float(sums[k]) for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(values)
    return dict(zip(keys, values.cpu().tolist()))


def all_reduce_tensor(value: Tensor, info: DistInfo) -> Tensor:
    """The sum of ``value`` over all ranks (in place when distributed)."""
    if info.enabled:
        dist.all_reduce(value)
    return value


def all_gather_object(obj: Any, info: DistInfo) -> list[Any]:
    """Every rank's ``obj`` (picklable), in rank order."""
    if not info.enabled:
        return [obj]
    out: list[Any] = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: Any, info: DistInfo, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` on every rank."""
    if not info.enabled:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def wrap_model(
    model: nn.Module, info: DistInfo, device: torch.device, fsdp: bool = False
) -> nn.Module:
    """The module to run forward/backward through: DDP (or FSDP2 ``fully_shard``) when
    distributed, the model itself otherwise. DDP averages gradients over ranks."""
    if not info.enabled:
        return model
    if fsdp:
        from torch.distributed.fsdp import fully_shard

        for block in _repeated_blocks(model):
            fully_shard(block)
        fully_shard(model)
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def _repeated_blocks(model: nn.Module) -> list[nn.Module]:
    """The members of the largest ModuleList (the transformer blocks): FSDP shards per block so
    one block's full weights at a time are gathered."""
    best: list[nn.Module] = []
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) > len(best):
            best = list(module)
    return best


def launch_command(nproc: int, argv: Sequence[str], module: str = "tfam") -> list[str]:
    """The torchrun command line that runs ``python -m module *argv`` on ``nproc`` local
    processes (a free port on localhost)."""
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise ValueError(f"nproc={nproc!r} is invalid: expected an int >= 1")
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        str(nproc),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        "localhost:0",
        "-m",
        module,
        *argv,
    ]


def launch(nproc: int, argv: Sequence[str], module: str = "tfam", device: str = "auto") -> int:
    """Run ``python -m module *argv`` on ``nproc`` processes under torchrun and return its exit
    status (non-zero when any worker failed or was killed): ``launch(2, ["train", "vit",
    "--data", "digits"])``. Pass ``argv`` without the option that asked for the launch. The
    device the workers will use (``--device`` in ``argv``) is checked first
    (:func:`check_launch`): a one-line ValueError instead of torchrun's report."""
    check_launch(nproc, device)
    return subprocess.call(launch_command(nproc, argv, module))
