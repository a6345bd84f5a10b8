"""The process's place among the workers: its tensor-parallel group.

A worker joins torch.distributed once (`init_distributed`, over its platform's collective
backend) before it builds the model; layers ask `tp_group()` at construction for their
shard and call its collectives while running. Without `init_distributed` (one device) the
group is this process alone and its collectives return their input.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

COLLECTIVE_TIMEOUT = timedelta(minutes=10)
"""How long a collective may wait for a peer (the executor notices a dead worker first)."""


@dataclass(frozen=True)
class TensorParallelGroup:
    """The ranks that split each layer's weights, and this process's rank among them."""

    rank: int = 0
    world_size: int = 1
    group: Any = None
    """The torch.distributed process group (None for a group of one)."""

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """The sum of `x` over the group (in place: `x` holds it after)."""
        if self.world_size > 1:
            dist.all_reduce(x, group=self.group)
        return x

    def all_gather(self, x: torch.Tensor, dim: int = -1) -> torch.Tensor:
        """Every rank's `x` concatenated along `dim`, in rank order."""
        if self.world_size == 1:
            return x
        parts = [torch.empty_like(x) for _ in range(self.world_size)]
        dist.all_gather(parts, x.contiguous(), group=self.group)
        return torch.cat(parts, dim=dim)


_tp_group = TensorParallelGroup()


def tp_group() -> TensorParallelGroup:
    """This process's tensor-parallel group."""
    return _tp_group


def init_distributed(backend: str, init_method: str, world_size: int, rank: int,
                     device: torch.device) -> TensorParallelGroup:
    """Join the process group of `world_size` workers (all of them one tensor-parallel
    group) over the collective `backend` (gloo, nccl, ...)."""
    global _tp_group
    dist.init_process_group(backend, init_method=init_method, world_size=world_size,
                            rank=rank, timeout=COLLECTIVE_TIMEOUT,
                            device_id=device if device.type != "cpu" else None)
    _tp_group = TensorParallelGroup(rank, world_size, dist.group.WORLD)
    return _tp_group


def destroy_distributed() -> None:
    """Leave the process group (at worker shutdown)."""
    global _tp_group
    if dist.is_initialized():
        dist.destroy_process_group()
    _tp_group = TensorParallelGroup()
