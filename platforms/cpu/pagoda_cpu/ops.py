"""CPU providers of the core ops: the same meaning as the references, fewer passes."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pagoda.ops import reference
from pagoda_cpu.paged_attention import paged_attention as cpu_paged_attention


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # PyTorch's fused kernel accumulates low-precision inputs in float32.
    return F.rms_norm(x, (x.shape[-1],), weight.to(x.dtype), eps)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    summed = (x + residual).to(x.dtype)
    return rms_norm(summed, weight, eps), summed




def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """In the input dtype: one extra rounding against the reference, within conformance."""
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]




def reshape_and_cache(
    key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    _, num_blocks, block_size, num_kv_heads, head_size = kv_cache.shape
    flat = kv_cache.view(2, num_blocks * block_size, num_kv_heads, head_size)
    if bool((slot_mapping < 0).any()):
        keep = slot_mapping >= 0
        key, value, slot_mapping = key[keep], value[keep], slot_mapping[keep]
    flat[0].index_copy_(0, slot_mapping, key.to(kv_cache.dtype))
    flat[1].index_copy_(0, slot_mapping, value.to(kv_cache.dtype))


def paged_attention(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    logits_soft_cap: float | None = None,
) -> torch.Tensor:
    if logits_soft_cap is not None:
        return reference.paged_attention(query, kv_cache, block_tables, query_start_loc,
                                         seq_lens, scale, sliding_window, logits_soft_cap)
    return cpu_paged_attention(query, kv_cache, block_tables, query_start_loc.tolist(),
                               seq_lens.tolist(), scale, sliding_window)
