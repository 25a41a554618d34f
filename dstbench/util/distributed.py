"""What a case needs from `torch.distributed`: who this rank is, rank 0's decision on every rank,
the DDP wrapper, and per-rank seeds.

Every function is safe to call in a plain process: it then answers as rank 0 of 1 and moves
nothing, so single-process code needs no branches of its own.
"""

from __future__ import annotations

import os
from collections.abc import Collection

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def local_rank() -> int:
    """This process's index on its node (`LOCAL_RANK`, set by torchrun); 0 outside torchrun."""
    return int(os.environ.get("LOCAL_RANK", "0")) if is_distributed() else 0


def barrier() -> None:
    """Wait for every rank; nothing outside torch.distributed."""
    if is_distributed():
        dist.barrier()


def rank_seed(seed: int, rank_: int) -> int:
    """The seed rank `rank_` draws its own randomness from (its data shard, dropout, augmentation).
    Rank 0 keeps `seed` itself, so it sees what a single process would."""
    if rank_ == 0:
        return int(seed)
    return int(np.random.SeedSequence([int(seed) % 2**32, int(rank_)]).generate_state(1)[0])


def _comm_device() -> torch.device:
    # NCCL moves CUDA tensors only; gloo takes host tensors.
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def broadcast_(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    """Overwrite `tensor`, in place, with rank `src`'s copy on every rank; returns it.

    This is how a rank-0 decision (a mask, a score vector, a generator state) becomes every rank's.
    A plain process returns the tensor untouched.
    """
    if not is_distributed():
        return tensor
    device = _comm_device()
    # Bool is not a type every backend reduces or broadcasts; its bytes travel as uint8.
    wire = tensor if tensor.dtype != torch.bool else tensor.view(torch.uint8)
    if wire.device == device and wire.is_contiguous():
        dist.broadcast(wire, src)
        return tensor
    staged = wire.to(device).contiguous()
    dist.broadcast(staged, src)
    wire.copy_(staged)
    return tensor


def broadcast_generator_(generator: torch.Generator, src: int = 0) -> None:
    """Give every rank rank `src`'s generator state, so their next random draws are the same."""
    if not is_distributed():
        return
    state = generator.get_state()
    broadcast_(state, src)
    generator.set_state(state)


def all_reduce_sum_(tensor: torch.Tensor) -> torch.Tensor:
    """Sum `tensor` over ranks, in place (nothing in a plain process)."""
    if not is_distributed():
        return tensor
    device = _comm_device()
    if tensor.device == device:
        dist.all_reduce(tensor)
        return tensor
    staged = tensor.to(device)
    dist.all_reduce(staged)
    tensor.copy_(staged)
    return tensor


def set_ignored(model: torch.nn.Module, ignored: Collection[str]) -> None:
    """Tell DDP which parameters (by name) it must not synchronise, replacing any earlier choice.

    DDP reads a name list from the module and marks the parameters themselves; the marks are
    sticky, so a parameter that takes part again (a BARTER block that regains a head) is unmarked
    here before the next wrapper is built.
    """
    names = sorted(ignored)
    model._ddp_params_and_buffers_to_ignore = names  # type: ignore[assignment]
    for name, param in model.named_parameters():
        if name in ignored:
            param._ddp_ignored = True  # type: ignore[attr-defined]
        elif hasattr(param, "_ddp_ignored"):
            del param._ddp_ignored  # type: ignore[attr-defined]


def wrap_ddp(model: torch.nn.Module, device: torch.device, ignored: Collection[str] = ()) -> DistributedDataParallel:
    """A DDP wrapper for `model` on `device` that leaves the parameters named in `ignored` alone.

    Building it checks that every rank holds parameters of the same shapes (DDP raises otherwise)
    and copies rank 0's values to every rank. Gradients live in DDP's buckets
    (`gradient_as_bucket_view`), so the wrapper adds no second copy of them: what a rank's memory
    figures show is the method's own footprint plus DDP's buckets.
    """
    set_ignored(model, ignored)
    return DistributedDataParallel(
        model,
        device_ids=[device.index if device.index is not None else torch.cuda.current_device()]
        if device.type == "cuda"
        else None,
        gradient_as_bucket_view=True,
    )
