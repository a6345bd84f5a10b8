"""Write the step's keys and values into the paged cache [2, blocks, block_size, K, D].

An fp8 cache gets clamp(x / scale, -448, 448) in e4m3, rounded to nearest even in float32
arithmetic before the cast (`_round_to_e4m3`), so that every Triton target stores the same
bytes as PyTorch's cast: Triton's CPU interpreter (3.9) rounds float32 -> float8 ties away
from zero and corrupts values whose mantissa rounds up into the next exponent, and the cast
of a value already on the e4m3 grid is exact everywhere.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.attention.backend import FP8_KV_CACHE_DTYPE, FP8_MAX
from pagoda.kernels.triton.common import pow2, unit_last_stride, wait_for_prior_kernels
from pagoda.kernels.triton.launch import DEFAULT_LAUNCH, TritonLaunch

_ROUNDING_BIAS = tl.constexpr(12582912.0)
"""1.5 * 2**23: float32 (y + bias) - bias is y rounded to an integer, ties to even, for
|y| < 2**22."""
_FP8_MAX = tl.constexpr(FP8_MAX)


@triton.jit
def _round_to_e4m3(x):
    """float32 x with |x| <= 448 rounded to the nearest e4m3 value (ties to even), as
    float32. e4m3 has 3 mantissa bits: a number in [2^e, 2^(e+1)) moves in steps of
    2^(e-3), and below 2^-6 (subnormals) in steps of 2^-9."""
    exponent = (x.to(tl.int32, bitcast=True) >> 23) & 0xFF  # biased by 127
    exponent = tl.maximum(exponent, 127 - 6)
    step = ((exponent - 3) << 23).to(tl.float32, bitcast=True)  # 2^(e - 3)
    inverse = ((257 - exponent) << 23).to(tl.float32, bitcast=True)  # 2^(3 - e)
    steps = x * inverse  # exact: a power of two
    rounded = tl.abs(((steps + _ROUNDING_BIAS) - _ROUNDING_BIAS) * step)
    return tl.where(x.to(tl.int32, bitcast=True) < 0, -rounded, rounded)  # keeps -0.0


@triton.jit
def _cache_value(x, scale, element_ty, FP8: tl.constexpr):
    """x as the cache stores it: its own type, or for fp8 scaled, saturated and rounded."""
    if FP8:
        x = tl.math.div_rn(x.to(tl.float32), scale)
        x = _round_to_e4m3(tl.minimum(tl.maximum(x, -_FP8_MAX), _FP8_MAX))
    return x.to(element_ty)


@triton.jit
def _write_kv_cache_kernel(
    key_ptr, value_ptr, key_cache_ptr, value_cache_ptr, slot_mapping_ptr, kv_scales_ptr,
    stride_kt, stride_kh, stride_vt, stride_vh,
    stride_cb, stride_cs, stride_ch,
    NUM_KV_HEADS: tl.constexpr, HEAD_SIZE: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    HEADS_PAD: tl.constexpr, HEAD_PAD: tl.constexpr, FP8: tl.constexpr, PDL: tl.constexpr,
):
    """One token: its [K, D] key and value to slot `slot_mapping[t]` (skipped when < 0).
    With FP8, kv_scales holds (key scale, value scale)."""
    wait_for_prior_kernels(PDL)
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)
    if slot < 0:
        return
    k_scale = 1.0
    v_scale = 1.0
    if FP8:
        k_scale = tl.load(kv_scales_ptr).to(tl.float32)
        v_scale = tl.load(kv_scales_ptr + 1).to(tl.float32)
    heads = tl.arange(0, HEADS_PAD)[:, None]
    dims = tl.arange(0, HEAD_PAD)[None, :]
    ok = (heads < NUM_KV_HEADS) & (dims < HEAD_SIZE)
    dst = (slot // BLOCK_SIZE) * stride_cb + (slot % BLOCK_SIZE) * stride_cs + heads * stride_ch
    k = tl.load(key_ptr + token * stride_kt + heads * stride_kh + dims, mask=ok)
    tl.store(key_cache_ptr + dst + dims,
             _cache_value(k, k_scale, key_cache_ptr.dtype.element_ty, FP8), mask=ok)
    v = tl.load(value_ptr + token * stride_vt + heads * stride_vh + dims, mask=ok)
    tl.store(value_cache_ptr + dst + dims,
             _cache_value(v, v_scale, value_cache_ptr.dtype.element_ty, FP8), mask=ok)


def write_kv_cache(
    key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
    kv_scales: torch.Tensor | None = None, *, launch: TritonLaunch = DEFAULT_LAUNCH,
) -> None:
    """See `pagoda.attention.reference.write_kv_cache`."""
    num_tokens, num_kv_heads, head_size = key.shape
    if num_tokens == 0:
        return
    fp8 = kv_cache.dtype == FP8_KV_CACHE_DTYPE
    assert kv_scales is not None or not fp8, "an fp8 KV cache needs kv_scales"
    key, value = unit_last_stride(key), unit_last_stride(value)
    key_cache, value_cache = kv_cache[0], kv_cache[1]
    assert key_cache.stride(-1) == 1 and key_cache.stride() == value_cache.stride()
    _write_kv_cache_kernel[(num_tokens,)](
        key, value, key_cache, value_cache, slot_mapping,
        kv_scales if fp8 else slot_mapping,  # not read without FP8
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        NUM_KV_HEADS=num_kv_heads, HEAD_SIZE=head_size, BLOCK_SIZE=kv_cache.shape[2],
        HEADS_PAD=pow2(num_kv_heads), HEAD_PAD=pow2(head_size), FP8=fp8,
        **launch.elementwise.kwargs(), **launch.dependency("elementwise"),
    )
