"""all_reduce on NVIDIA GPUs ("cuda_symm_mem" provider): the small messages of tensor
parallelism (a decode step's activations) through PyTorch's symmetric memory, the rest
through NCCL as the reference does.

Each group gets one buffer of MAX_BYTES that every GPU of the group maps (allocated and
exchanged at the group's first all-reduce, which the profiling step makes before any
graph is captured). A message that fits is reduced by one kernel,
`torch.ops.symm_mem.one_shot_all_reduce_copy`: each GPU copies its part into its buffer,
then reads every peer's over NVLink and sums, without NCCL's protocol. No multicast
(the lent machines keep NVLink SHARP off). Whether a group can have the buffer is decided
by all its ranks together, so that all take the same path.

Off until measured against NCCL on a machine of several GPUs (`bash ci/gpu.sh multigpu`:
the conformance kit's all-reduce, the tensor-parallel tests with it on, and benchmark Z):
ENABLE_ENV turns it on.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem  # also registers torch.ops.symm_mem

logger = logging.getLogger(__name__)

ENABLE_ENV = "PAGODA_CUDA_SYMM_ALL_REDUCE"
MAX_BYTES = 512 * 1024
"""Largest message taken (64 tokens of a 4096-wide bf16 hidden state); larger ones go to
NCCL, whose ring moves each byte fewer times."""
DTYPES = (torch.bfloat16, torch.float32)
ALIGN = 16
"""Bytes a message must be a multiple of (the kernel's vector loads)."""

Allocate = Callable[[torch.device], torch.Tensor]
Exchange = Callable[[torch.Tensor, Any], None]

_buffers: dict[str, torch.Tensor | None] = {}


def unavailable() -> str | None:
    """Why the provider cannot run here, or None."""
    if os.environ.get(ENABLE_ENV) != "1":
        return f"off until measured on several GPUs ({ENABLE_ENV}=1 turns it on)"
    if not torch.cuda.is_available():
        return "no CUDA device is visible to torch"
    if not hasattr(torch.ops.symm_mem, "one_shot_all_reduce_copy"):
        return f"torch {torch.__version__} has no symmetric-memory one-shot all-reduce"
    return None


def all_reduce(x: torch.Tensor, group: Any) -> torch.Tensor:
    """See `pagoda.ops.reference.all_reduce`."""
    size = x.numel() * x.element_size()
    fits = (x.device.type == "cuda" and x.dtype in DTYPES and x.is_contiguous()
            and size <= MAX_BYTES and size % ALIGN == 0)
    buffer = _buffer(group, x.device) if fits else None
    if buffer is None:
        dist.all_reduce(x, group=group)
        return x
    staged = buffer.view(x.dtype)[:x.numel()].view_as(x)
    return torch.ops.symm_mem.one_shot_all_reduce_copy(staged, x, "sum", group.group_name)


def _buffer(group: Any, device: torch.device) -> torch.Tensor | None:
    name = group.group_name
    if name not in _buffers:
        _buffers[name] = map_buffer(group, device, _allocate, _exchange)
    return _buffers[name]


def _allocate(device: torch.device) -> torch.Tensor:
    return symm_mem.empty(MAX_BYTES, dtype=torch.uint8, device=device)


def _exchange(buffer: torch.Tensor, group: Any) -> None:
    symm_mem.rendezvous(buffer, group.group_name)


def map_buffer(group: Any, device: torch.device, allocate: Allocate,
               exchange: Exchange) -> torch.Tensor | None:
    """A buffer every rank of `group` has mapped (`allocate` here, then the collective
    `exchange`), or None on every rank if any rank failed at either step: after each, the
    ranks agree (an all-reduce of their successes) before going on, so that no rank waits
    in an exchange its peers never join and all take the same path."""
    buffer = None
    try:
        buffer = allocate(device)
    except Exception as e:  # noqa: BLE001 - any failure means NCCL for this group
        logger.info("symmetric memory for all-reduce: not allocated (%s: %s); NCCL serves",
                    type(e).__name__, e)
    if not _all_succeeded(buffer is not None, group, device):
        return None
    try:
        exchange(buffer, group)
    except Exception as e:  # noqa: BLE001
        logger.info("symmetric memory for all-reduce: not exchanged (%s: %s); NCCL serves",
                    type(e).__name__, e)
        buffer = None
    if not _all_succeeded(buffer is not None, group, device):
        return None
    return buffer


def _all_succeeded(ok: bool, group: Any, device: torch.device) -> bool:
    flag = torch.tensor([int(ok)], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    return bool(flag.item())
