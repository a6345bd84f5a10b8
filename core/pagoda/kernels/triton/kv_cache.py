"""Write the step's keys and values into the paged cache [2, blocks, block_size, K, D]."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.kernels.triton.common import pow2, unit_last_stride
from pagoda.kernels.triton.launch import DEFAULT_LAUNCH, TritonLaunch


@triton.jit
def _write_kv_cache_kernel(
    key_ptr, value_ptr, key_cache_ptr, value_cache_ptr, slot_mapping_ptr,
    stride_kt, stride_kh, stride_vt, stride_vh,
    stride_cb, stride_cs, stride_ch,
    NUM_KV_HEADS: tl.constexpr, HEAD_SIZE: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    HEADS_PAD: tl.constexpr, HEAD_PAD: tl.constexpr,
):
    """One token: its [K, D] key and value to slot `slot_mapping[t]` (skipped when < 0)."""
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)
    if slot < 0:
        return
    heads = tl.arange(0, HEADS_PAD)[:, None]
    dims = tl.arange(0, HEAD_PAD)[None, :]
    ok = (heads < NUM_KV_HEADS) & (dims < HEAD_SIZE)
    dst = (slot // BLOCK_SIZE) * stride_cb + (slot % BLOCK_SIZE) * stride_cs + heads * stride_ch
    k = tl.load(key_ptr + token * stride_kt + heads * stride_kh + dims, mask=ok)
    tl.store(key_cache_ptr + dst + dims, k.to(key_cache_ptr.dtype.element_ty), mask=ok)
    v = tl.load(value_ptr + token * stride_vt + heads * stride_vh + dims, mask=ok)
    tl.store(value_cache_ptr + dst + dims, v.to(value_cache_ptr.dtype.element_ty), mask=ok)


def write_kv_cache(
    key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
    *, launch: TritonLaunch = DEFAULT_LAUNCH,
) -> None:
    """See `pagoda.attention.reference.write_kv_cache`."""
    num_tokens, num_kv_heads, head_size = key.shape
    if num_tokens == 0:
        return
    key, value = unit_last_stride(key), unit_last_stride(value)
    key_cache, value_cache = kv_cache[0], kv_cache[1]
    assert key_cache.stride(-1) == 1 and key_cache.stride() == value_cache.stride()
    _write_kv_cache_kernel[(num_tokens,)](
        key, value, key_cache, value_cache, slot_mapping,
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        NUM_KV_HEADS=num_kv_heads, HEAD_SIZE=head_size, BLOCK_SIZE=kv_cache.shape[2],
        HEADS_PAD=pow2(num_kv_heads), HEAD_PAD=pow2(head_size), **launch.elementwise.kwargs(),
    )
