"""The reference attention backend: plain PyTorch, any device, defines correctness.

`write_kv_cache` and `paged_attention` define what every backend computes, over core's
cache layout ("2BSKD", see `KVCacheSpec`); the attention conformance kit
(`pagoda.testing.attention_conformance`) compares backends with them.
Shapes: T tokens, H query heads, K kv heads, D head size, B sequences.

An fp8 cache (`FP8_KV_CACHE_DTYPE`) comes with `kv_scales`, float32 [2] (key scale, value
scale): `quantize_fp8` and `dequantize` define how values are stored and read back.
"""

from __future__ import annotations

import torch

from pagoda.attention.backend import (
    FP8_KV_CACHE_DTYPE,
    FP8_MAX,
    AttentionBackend,
    AttentionImpl,
    AttentionMetadata,
)


def quantize_fp8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """clamp(x / scale, -448, 448) as e4m3 (round to nearest even), computed in float32."""
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_KV_CACHE_DTYPE)


def dequantize(stored: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    """Cached values as float32: stored * scale for an fp8 cache, else the values."""
    if stored.dtype != FP8_KV_CACHE_DTYPE:
        return stored.float()
    return stored.float() * scale


def _scales(kv_cache: torch.Tensor,
            kv_scales: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    if kv_cache.dtype != FP8_KV_CACHE_DTYPE:
        return None, None
    if kv_scales is None:
        raise ValueError("an fp8 KV cache needs kv_scales (key scale, value scale)")
    return kv_scales[0], kv_scales[1]


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """An fp8 tensor as its bytes (torch before 2.10 cannot index float8 on the CPU)."""
    return t.view(torch.uint8) if t.element_size() == 1 and t.is_floating_point() else t


def write_kv_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    kv_scales: torch.Tensor | None = None,
) -> None:
    """Write key/value [T, K, D] into the paged cache [2, num_blocks, block_size, K, D].

    Token t goes to slot `slot_mapping[t]` = block * block_size + offset; a negative slot
    means "do not cache" (padding). An fp8 cache stores `quantize_fp8(x, scale)`.
    """
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    block_size = kv_cache.shape[2]
    blocks, offsets = slots // block_size, slots % block_size
    k_scale, v_scale = _scales(kv_cache, kv_scales)
    if k_scale is None or v_scale is None:
        key, value = key[keep].to(kv_cache.dtype), value[keep].to(kv_cache.dtype)
    else:
        key, value = quantize_fp8(key[keep], k_scale), quantize_fp8(value[keep], v_scale)
    cache = _bytes(kv_cache)
    cache[0, blocks, offsets] = _bytes(key)
    cache[1, blocks, offsets] = _bytes(value)


def paged_attention(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    logits_soft_cap: float | None = None,
    kv_scales: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal attention of query [T, H, D] over the paged cache, for a mixed batch.

    Sequence b owns query rows query_start_loc[b]:query_start_loc[b+1]; they are its last
    q_len tokens, and its keys/values (already written to the cache, including the new
    tokens) are its first seq_lens[b] slots along block_tables[b]. A prefill is q_len ==
    seq_len, a decode q_len == 1, a prefill chunk anything between. Query heads are
    grouped over kv heads (GQA). Cached values are read as float32 (an fp8 cache's times
    its scale, `dequantize`). Returns [T, H, D] in query's dtype.
    """
    k_scale, v_scale = _scales(kv_cache, kv_scales)
    out = torch.empty_like(query)
    num_heads, num_kv_heads = query.shape[1], kv_cache.shape[3]
    group = num_heads // num_kv_heads
    block_size = kv_cache.shape[2]
    starts = query_start_loc.tolist()
    for b, seq_len in enumerate(seq_lens.tolist()):
        q = query[starts[b] : starts[b + 1]].float()  # [q_len, H, D]
        q_len = q.shape[0]
        if q_len == 0:
            continue
        num_blocks = -(-seq_len // block_size)
        blocks = block_tables[b, :num_blocks].long()
        cache = _bytes(kv_cache)
        k = cache[0, blocks].flatten(0, 1)[:seq_len].view(kv_cache.dtype)  # [S, K, D]
        v = cache[1, blocks].flatten(0, 1)[:seq_len].view(kv_cache.dtype)
        k, v = dequantize(k, k_scale), dequantize(v, v_scale)
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,shd->hqs", q, k) * scale
        if logits_soft_cap is not None:
            scores = logits_soft_cap * torch.tanh(scores / logits_soft_cap)
        q_pos = torch.arange(seq_len - q_len, seq_len, device=q.device)[:, None]
        k_pos = torch.arange(seq_len, device=q.device)[None, :]
        masked = k_pos > q_pos
        if sliding_window is not None:
            masked |= k_pos <= q_pos - sliding_window
        scores.masked_fill_(masked, float("-inf"))
        probs = scores.softmax(dim=-1)
        out[starts[b] : starts[b + 1]] = torch.einsum("hqs,shd->qhd", probs, v).to(query.dtype)
    return out


class ReferenceAttentionImpl(AttentionImpl):
    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: AttentionMetadata,
        *,
        kv_scales: torch.Tensor | None = None,
    ) -> torch.Tensor:
        write_kv_cache(key, value, kv_cache, metadata.slot_mapping, kv_scales)
        return paged_attention(
            query,
            kv_cache,
            metadata.block_tables,
            metadata.query_start_loc,
            metadata.seq_lens,
            self.scale,
            self.sliding_window,
            self.logits_soft_cap,
            kv_scales,
        )


class ReferenceAttentionBackend(AttentionBackend):
    """Loops over sequences in Python: slow, obviously right, usable everywhere."""

    name = "reference"
    supported_kv_cache_dtypes = (torch.float32, torch.float16, torch.bfloat16,
                                 FP8_KV_CACHE_DTYPE)

    @classmethod
    def get_impl_cls(cls) -> type[AttentionImpl]:
        return ReferenceAttentionImpl
