"""CPU providers of the core ops: the same meaning as the references, fewer passes."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pagoda.ops import reference


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if x.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    return F.rms_norm(x.float(), (x.shape[-1],), weight.float(), eps).to(x.dtype)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    summed = (x + residual).to(x.dtype)
    return rms_norm(summed, weight, eps), summed


rotary_embedding = reference.rotary_embedding


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    if x.dtype == torch.float32:
        return F.silu(x[..., :d]) * x[..., d:]
    return reference.silu_and_mul(x)


gelu_and_mul = reference.gelu_and_mul


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
    """Per sequence: gather its blocks, then PyTorch's fused SDPA (GQA without copies)."""
    if logits_soft_cap is not None:
        return reference.paged_attention(query, kv_cache, block_tables, query_start_loc,
                                         seq_lens, scale, sliding_window, logits_soft_cap)
    return sdpa_paged_attention(query, kv_cache, block_tables, query_start_loc.tolist(),
                                seq_lens.tolist(), scale, sliding_window)


def sdpa_paged_attention(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: list[int],
    seq_lens: list[int],
    scale: float,
    sliding_window: int | None = None,
) -> torch.Tensor:
    out = torch.empty_like(query)
    block_size = kv_cache.shape[2]
    group = query.shape[1] // kv_cache.shape[3]
    for b, seq_len in enumerate(seq_lens):
        start, end = query_start_loc[b], query_start_loc[b + 1]
        q_len = end - start
        if q_len == 0:
            continue
        blocks = block_tables[b, : -(-seq_len // block_size)]
        k = kv_cache[0, blocks].flatten(0, 1)[:seq_len].transpose(0, 1)  # [K, S, D]
        v = kv_cache[1, blocks].flatten(0, 1)[:seq_len].transpose(0, 1)
        q = query[start:end].transpose(0, 1)  # [H, q, D]
        mask = None
        if sliding_window is not None or (q_len > 1 and q_len != seq_len):
            q_pos = torch.arange(seq_len - q_len, seq_len)[:, None]
            k_pos = torch.arange(seq_len)[None, :]
            allowed = k_pos <= q_pos
            if sliding_window is not None:
                allowed &= k_pos > q_pos - sliding_window
            mask = allowed
        o = F.scaled_dot_product_attention(
            q, k.to(q.dtype), v.to(q.dtype), attn_mask=mask,
            is_causal=mask is None and q_len > 1, scale=scale, enable_gqa=group > 1,
        )
        out[start:end] = o.transpose(0, 1)
    return out
