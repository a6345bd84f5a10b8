"""The batched LoRA pair (`lora_shrink`, `lora_expand`): every token applies its own
adapter's slot, or none.

Shrinking, a program takes a tile of tokens and one slot: it multiplies the tile's rows
of that slot (the others masked, so not read) by the slot's A with `tl.dot` and writes
those rows; a program whose slot no token of the tile uses ends at once. Expanding, a
program takes a tile of tokens and of output features and, for each slot some token of
the tile uses, adds the product of those rows' h and the slot's B. So each token's x is
read once, tokens of one adapter share its weights in tensor-core products, and nothing
depends on the step's slots but the data: the launches are the same for every step of a
shape (decode graphs capture them). Tiles of 64 tokens where a step has more than 16
read each slot's weights a quarter as often.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.kernels.triton.common import dot_dtype, pow2
from pagoda.kernels.triton.launch import DEFAULT_LAUNCH, TritonLaunch

BLOCK_K = 64
BLOCK_N = 64


@triton.jit
def _lora_shrink_kernel(out_ptr, x_ptr, a_ptr, slots_ptr, num_tokens, k, rank,
                        stride_x, stride_as, stride_ar, stride_out,
                        BLOCK_T: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr,
                        DOT_DTYPE: tl.constexpr):
    tok = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    s = tl.program_id(1)
    mine = (tl.load(slots_ptr + tok, mask=tok < num_tokens, other=-1) == s)
    if tl.max(mine.to(tl.int32), axis=0) > 0:
        r = tl.arange(0, BLOCK_R)
        rows = tok.to(tl.int64)[:, None] * stride_x
        a_rows = a_ptr + s * stride_as + r[None, :] * stride_ar
        acc = tl.zeros((BLOCK_T, BLOCK_R), tl.float32)
        for k0 in range(0, k, BLOCK_K):
            kk = k0 + tl.arange(0, BLOCK_K)
            x = tl.load(x_ptr + rows + kk[None, :], mask=mine[:, None] & (kk[None, :] < k),
                        other=0.0).to(DOT_DTYPE)
            a = tl.load(a_rows + kk[:, None], mask=(r[None, :] < rank) & (kk[:, None] < k),
                        other=0.0).to(DOT_DTYPE)  # [BLOCK_K, BLOCK_R]: A^T
            acc = tl.dot(x, a, acc, input_precision="ieee")
        tl.store(out_ptr + tok.to(tl.int64)[:, None] * stride_out + r[None, :],
                 acc.to(out_ptr.dtype.element_ty), mask=mine[:, None] & (r[None, :] < rank))


@triton.jit
def _lora_expand_kernel(out_ptr, y_ptr, h_ptr, b_ptr, slots_ptr, num_tokens, n, rank,
                        num_slots, stride_y, stride_h, stride_bs, stride_br, stride_out,
                        BLOCK_T: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr,
                        DOT_DTYPE: tl.constexpr):
    tok = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    real = tok < num_tokens
    slot = tl.load(slots_ptr + tok, mask=real, other=-1)
    r = tl.arange(0, BLOCK_R)
    h_rows = h_ptr + tok.to(tl.int64)[:, None] * stride_h + r[None, :]
    delta = tl.zeros((BLOCK_T, BLOCK_N), tl.float32)
    for s in range(0, num_slots):
        mine = slot == s
        if tl.max(mine.to(tl.int32), axis=0) > 0:
            h = tl.load(h_rows, mask=mine[:, None] & (r[None, :] < rank),
                        other=0.0).to(DOT_DTYPE)
            b = tl.load(b_ptr + s * stride_bs + r[:, None] * stride_br
                        + cols[None, :], mask=(r[:, None] < rank) & (cols[None, :] < n),
                        other=0.0).to(DOT_DTYPE)
            delta = tl.dot(h, b, delta, input_precision="ieee")
    out_ty = out_ptr.dtype.element_ty
    inside = real[:, None] & (cols[None, :] < n)
    y = tl.load(y_ptr + tok.to(tl.int64)[:, None] * stride_y + cols[None, :], mask=inside,
                other=0.0).to(tl.float32)
    # The delta rounded to the output dtype before the sum, as the reference's matmul does.
    out = y + delta.to(out_ty).to(tl.float32)
    tl.store(out_ptr + tok.to(tl.int64)[:, None] * stride_out + cols[None, :],
             out.to(out_ty), mask=inside)


def _token_tile(num_tokens: int) -> int:
    """Tokens a program takes: 16 (tl.dot's smallest tile) for a few, else 64."""
    return 16 if num_tokens <= 16 else 64


def lora_shrink(x: torch.Tensor, a: torch.Tensor, slots: torch.Tensor, *,
                launch: TritonLaunch = DEFAULT_LAUNCH) -> torch.Tensor:
    """See `pagoda.ops.reference.lora_shrink`."""
    num_slots, rank, k = a.shape
    x, a, slots = x.contiguous(), a.contiguous(), slots.contiguous()
    out = torch.zeros(x.shape[0], rank, dtype=x.dtype, device=x.device)  # rows of no slot
    if x.shape[0]:
        block_t = _token_tile(x.shape[0])
        _lora_shrink_kernel[(triton.cdiv(x.shape[0], block_t), num_slots)](
            out, x, a, slots, x.shape[0], k, rank, x.stride(0), a.stride(0),
            a.stride(1), out.stride(0), BLOCK_T=block_t, BLOCK_R=pow2(rank, 16),
            BLOCK_K=BLOCK_K, DOT_DTYPE=dot_dtype(x.dtype, _lora_shrink_kernel),
            **launch.gemv.kwargs())
    return out


def lora_expand(y: torch.Tensor, h: torch.Tensor, b: torch.Tensor, slots: torch.Tensor, *,
                launch: TritonLaunch = DEFAULT_LAUNCH) -> torch.Tensor:
    """See `pagoda.ops.reference.lora_expand`."""
    num_slots, rank, n = b.shape
    y, h, b, slots = y.contiguous(), h.contiguous(), b.contiguous(), slots.contiguous()
    out = torch.empty_like(y)
    if y.shape[0]:
        block_t = _token_tile(y.shape[0])
        grid = (triton.cdiv(y.shape[0], block_t), triton.cdiv(n, BLOCK_N))
        _lora_expand_kernel[grid](
            out, y, h, b, slots, y.shape[0], n, rank, num_slots, y.stride(0), h.stride(0),
            b.stride(0), b.stride(1), out.stride(0), BLOCK_T=block_t, BLOCK_R=pow2(rank, 16),
            BLOCK_N=BLOCK_N, DOT_DTYPE=dot_dtype(y.dtype, _lora_expand_kernel),
            **launch.gemv.kwargs())
    return out
