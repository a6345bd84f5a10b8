"""The process's place among the workers: its tensor-parallel group and pipeline stage.

A worker joins torch.distributed once (`init_distributed`, over its platform's collective
backend) before it builds the model; layers ask `tp_group()` and `pp_group()` at
construction for their shard and stage, and call their collectives while running. Ranks
are laid out stage by stage: rank = stage * tensor_parallel_size + tp_rank. Without
`init_distributed` (one device) both groups are this process alone.
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
    """The ranks that split each layer's weights, and this process's rank among them.
    (Layers sum their partial results with the `all_reduce` op over `group`.)"""

    rank: int = 0
    world_size: int = 1
    group: Any = None
    """The torch.distributed process group (None for a group of one)."""
    expert_parallel: bool = False
    """Whether mixture-of-experts layers split their experts over the ranks (each rank
    whole experts) rather than every expert's intermediate features."""

    def all_gather(self, x: torch.Tensor, dim: int = -1) -> torch.Tensor:
        """Every rank's `x` concatenated along `dim`, in rank order."""
        if self.world_size == 1:
            return x
        parts = [torch.empty_like(x) for _ in range(self.world_size)]
        dist.all_gather(parts, x.contiguous(), group=self.group)
        return torch.cat(parts, dim=dim)


@dataclass(frozen=True)
class PipelineGroup:
    """The stages that split the model's layers, and this process's stage. Each rank of
    a stage sends its activations to the rank with the same tensor-parallel rank in the
    next stage (`global_rank` ± `stride`)."""

    rank: int = 0
    world_size: int = 1
    global_rank: int = 0
    stride: int = 1
    """Global ranks between a rank and its counterpart in the next stage (the TP size)."""

    @property
    def is_first(self) -> bool:
        return self.rank == 0

    @property
    def is_last(self) -> bool:
        return self.rank == self.world_size - 1

    def layers(self, num_layers: int) -> range:
        """The layers of this stage: contiguous, the first stages one more where they do
        not split evenly."""
        base, extra = divmod(num_layers, self.world_size)
        start = self.rank * base + min(self.rank, extra)
        return range(start, start + base + (self.rank < extra))

    def send(self, tensors: list[torch.Tensor]) -> None:
        """Hand `tensors` to the next stage."""
        for tensor in tensors:
            dist.send(tensor.contiguous(), self.global_rank + self.stride)

    def recv(self, like: list[torch.Tensor]) -> list[torch.Tensor]:
        """The previous stage's tensors, into `like` (their shapes and dtypes)."""
        for tensor in like:
            dist.recv(tensor, self.global_rank - self.stride)
        return like


_tp_group = TensorParallelGroup()
_pp_group = PipelineGroup()


def tp_group() -> TensorParallelGroup:
    """This process's tensor-parallel group."""
    return _tp_group


def pp_group() -> PipelineGroup:
    """This process's pipeline stage."""
    return _pp_group


def init_distributed(backend: str, init_method: str, tensor_parallel_size: int,
                     pipeline_parallel_size: int, rank: int,
                     device: torch.device, *, expert_parallel: bool = False) -> None:
    """Join the process group of every worker of the engine over the collective `backend`
    (gloo, nccl, ...), then the tensor-parallel group of this rank's stage (whose ranks
    split experts whole if `expert_parallel`)."""
    global _tp_group, _pp_group
    world_size = tensor_parallel_size * pipeline_parallel_size
    dist.init_process_group(backend, init_method=init_method, world_size=world_size,
                            rank=rank, timeout=COLLECTIVE_TIMEOUT,
                            device_id=device if device.type != "cpu" else None)
    stage, tp_rank = divmod(rank, tensor_parallel_size)
    group = dist.group.WORLD
    if pipeline_parallel_size > 1 and tensor_parallel_size > 1:
        for first in range(0, world_size, tensor_parallel_size):  # every rank makes each
            ranks = list(range(first, first + tensor_parallel_size))
            created = dist.new_group(ranks, timeout=COLLECTIVE_TIMEOUT)
            if rank in ranks:
                group = created
    _tp_group = TensorParallelGroup(tp_rank, tensor_parallel_size, group, expert_parallel)
    _pp_group = PipelineGroup(stage, pipeline_parallel_size, rank, tensor_parallel_size)


def destroy_distributed() -> None:
    """Leave the process groups (at worker shutdown)."""
    global _tp_group, _pp_group
    if dist.is_initialized():
        dist.destroy_process_group()
    _tp_group, _pp_group = TensorParallelGroup(), PipelineGroup()
