"""Rotary position embedding of query and key, neox or gptj pairs, partial `rot_dim`."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.kernels.triton.common import pow2, unit_last_stride, wait_for_prior_kernels
from pagoda.kernels.triton.launch import DEFAULT_LAUNCH, TritonLaunch


@triton.jit
def _rotate(
    out_ptr, x_ptr, token, stride_ot, stride_oh, stride_xt, stride_xh, cos, sin,
    NUM_HEADS: tl.constexpr, HEAD_SIZE: tl.constexpr, ROT_DIM: tl.constexpr,
    IS_NEOX: tl.constexpr, HEADS_PAD: tl.constexpr, HALF_PAD: tl.constexpr,
    HEAD_PAD: tl.constexpr,
):
    """Rotate every head of one token; dims past ROT_DIM are copied unchanged."""
    heads = tl.arange(0, HEADS_PAD)[:, None]
    pairs = tl.arange(0, HALF_PAD)[None, :]
    ok = (heads < NUM_HEADS) & (pairs < ROT_DIM // 2)
    if IS_NEOX:
        first, second = pairs, pairs + ROT_DIM // 2
    else:
        first, second = 2 * pairs, 2 * pairs + 1
    src = x_ptr + token * stride_xt + heads * stride_xh
    dst = out_ptr + token * stride_ot + heads * stride_oh
    x1 = tl.load(src + first, mask=ok, other=0.0).to(tl.float32)
    x2 = tl.load(src + second, mask=ok, other=0.0).to(tl.float32)
    ty = out_ptr.dtype.element_ty
    tl.store(dst + first, (x1 * cos - x2 * sin).to(ty), mask=ok)
    tl.store(dst + second, (x2 * cos + x1 * sin).to(ty), mask=ok)
    if ROT_DIM < HEAD_SIZE:
        dims = tl.arange(0, HEAD_PAD)[None, :]
        rest = (heads < NUM_HEADS) & (dims >= ROT_DIM) & (dims < HEAD_SIZE)
        tl.store(dst + dims, tl.load(src + dims, mask=rest), mask=rest)


@triton.jit
def _rotary_kernel(
    q_out_ptr, k_out_ptr, q_ptr, k_ptr, positions_ptr, cos_sin_ptr,
    stride_qot, stride_qoh, stride_kot, stride_koh,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_cos_sin,
    NUM_HEADS: tl.constexpr, NUM_KV_HEADS: tl.constexpr, HEAD_SIZE: tl.constexpr,
    ROT_DIM: tl.constexpr, IS_NEOX: tl.constexpr, HEADS_PAD: tl.constexpr,
    KV_HEADS_PAD: tl.constexpr, HALF_PAD: tl.constexpr, HEAD_PAD: tl.constexpr,
    PDL: tl.constexpr,
):
    wait_for_prior_kernels(PDL)
    token = tl.program_id(0).to(tl.int64)
    pos = tl.load(positions_ptr + token).to(tl.int64)
    pairs = tl.arange(0, HALF_PAD)[None, :]
    ok = pairs < ROT_DIM // 2
    row = cos_sin_ptr + pos * stride_cos_sin
    cos = tl.load(row + pairs, mask=ok, other=0.0).to(tl.float32)
    sin = tl.load(row + ROT_DIM // 2 + pairs, mask=ok, other=0.0).to(tl.float32)
    _rotate(q_out_ptr, q_ptr, token, stride_qot, stride_qoh, stride_qt, stride_qh, cos, sin,
            NUM_HEADS, HEAD_SIZE, ROT_DIM, IS_NEOX, HEADS_PAD, HALF_PAD, HEAD_PAD)
    _rotate(k_out_ptr, k_ptr, token, stride_kot, stride_koh, stride_kt, stride_kh, cos, sin,
            NUM_KV_HEADS, HEAD_SIZE, ROT_DIM, IS_NEOX, KV_HEADS_PAD, HALF_PAD, HEAD_PAD)


def rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
    *,
    launch: TritonLaunch = DEFAULT_LAUNCH,
) -> tuple[torch.Tensor, torch.Tensor]:
    """See `pagoda.ops.reference.rotary_embedding`; returns new tensors."""
    num_tokens, num_heads, head_size = query.shape
    num_kv_heads = key.shape[1]
    rot_dim = cos_sin_cache.shape[-1]
    query, key = unit_last_stride(query), unit_last_stride(key)
    cos_sin_cache = unit_last_stride(cos_sin_cache)
    q_out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
    k_out = torch.empty(key.shape, dtype=key.dtype, device=key.device)
    if num_tokens:
        _rotary_kernel[(num_tokens,)](
            q_out, k_out, query, key, positions, cos_sin_cache,
            q_out.stride(0), q_out.stride(1), k_out.stride(0), k_out.stride(1),
            query.stride(0), query.stride(1), key.stride(0), key.stride(1),
            cos_sin_cache.stride(0),
            NUM_HEADS=num_heads, NUM_KV_HEADS=num_kv_heads, HEAD_SIZE=head_size,
            ROT_DIM=rot_dim, IS_NEOX=is_neox, HEADS_PAD=pow2(num_heads),
            KV_HEADS_PAD=pow2(num_kv_heads), HALF_PAD=pow2(rot_dim // 2),
            HEAD_PAD=pow2(head_size), **launch.elementwise.kwargs(), **launch.dependency("elementwise"),
        )
    return q_out, k_out
