"""The batched LoRA pair (`lora_shrink`, `lora_expand`): every token applies its own
adapter's slot, or none.

The kernels read the step's tokens grouped by slot (`order` and `tiles`, see
`pagoda.ops.lora_reference.group_by_slot`, computed once per step): a program takes one
tile, up to 64 tokens of one slot, gathers their rows and multiplies them by that slot's
weights with `tl.dot`, so each token is computed once and tokens of one adapter share its
weights in tensor-core products. The shrink's programs also split K (a tile's product
over all of K is a long chain of loads and a step has only ~T/64 + slots tiles: too few
programs to fill a GPU), their float32 partial sums added in split order by a second
kernel; the expand's take a block of output features each. A tile of tokens with no
adapter writes zeros (shrink) or copies y (expand). The grids depend only on the buffers'
shapes, never on the step's slots, so decode graphs capture the launches. Steps of up to
64 tokens take a tile's rows 16 at a time.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.kernels.triton.common import dot_dtype, parallel_units, pow2
from pagoda.kernels.triton.gemv import sum_splits
from pagoda.kernels.triton.launch import DEFAULT_LAUNCH, TritonLaunch
from pagoda.ops.lora_reference import LORA_TILE, tiles_for

BLOCK_K = 64
BLOCK_N = 64
MIN_SPLIT_K = 256
"""Fewest input features of one shrink program's split of K."""
PROGRAMS_PER_UNIT = 2
"""Shrink programs (tiles x splits) the splits aim at per streaming multiprocessor."""


# The step's token count and the shrink's split count change from step to step: left
# unspecialised (and not constexpr), so that one compiled variant serves every step and no
# step of a run waits for a compile.
@triton.jit(do_not_specialize=["num_tokens", "num_splits"])
def _lora_shrink_kernel(out_ptr, part_ptr, x_ptr, a_ptr, order_ptr, tiles_ptr, num_tokens, k,
                        rank, split_len, num_splits, stride_x, stride_as, stride_ar,
                        stride_out, TILE: tl.constexpr, BLOCK_T: tl.constexpr,
                        BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr,
                        DOT_DTYPE: tl.constexpr):
    """Program (tile, split): the tile's tokens times its slot's A over the split's part of
    K; into `out` (x's dtype) when K is not split, else float32 partial sums into `part`
    [num_splits, num_tokens, rank]."""
    tile = tl.program_id(0)
    split = tl.program_id(1)
    slot = tl.load(tiles_ptr + tile * 3)
    first = tl.load(tiles_ptr + tile * 3 + 1)
    count = tl.load(tiles_ptr + tile * 3 + 2)
    lo = split * split_len
    hi = tl.minimum(lo + split_len, k)
    r = tl.arange(0, BLOCK_R)
    a_rows = a_ptr + slot * stride_as + r[None, :] * stride_ar
    for r0 in range(0, TILE, BLOCK_T):
        i = r0 + tl.arange(0, BLOCK_T)
        tok = tl.load(order_ptr + first + i, mask=i < count, other=0)
        real = (i < count) & (tok < num_tokens)
        acc = tl.zeros((BLOCK_T, BLOCK_R), tl.float32)
        if (slot >= 0) & (r0 < count):
            rows = x_ptr + tok.to(tl.int64)[:, None] * stride_x
            for k0 in range(lo, hi, BLOCK_K):
                kk = k0 + tl.arange(0, BLOCK_K)
                x = tl.load(rows + kk[None, :], mask=real[:, None] & (kk[None, :] < hi),
                            other=0.0).to(DOT_DTYPE)
                a = tl.load(a_rows + kk[:, None], mask=(r[None, :] < rank) & (kk[:, None] < hi),
                            other=0.0).to(DOT_DTYPE)  # [BLOCK_K, BLOCK_R]: A^T
                acc = tl.dot(x, a, acc, input_precision="ieee")
        keep = real[:, None] & (r[None, :] < rank)
        if num_splits == 1:
            tl.store(out_ptr + tok.to(tl.int64)[:, None] * stride_out + r[None, :],
                     acc.to(out_ptr.dtype.element_ty), mask=keep)
        else:
            tl.store(part_ptr + (split * num_tokens + tok.to(tl.int64))[:, None] * rank
                     + r[None, :], acc, mask=keep)


@triton.jit(do_not_specialize=["num_tokens"])
def _lora_expand_kernel(out_ptr, y_ptr, h_ptr, b_ptr, order_ptr, tiles_ptr, num_tokens, n,
                        rank, stride_y, stride_h, stride_bs, stride_br, stride_out,
                        TILE: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_R: tl.constexpr,
                        BLOCK_N: tl.constexpr, DOT_DTYPE: tl.constexpr):
    tile = tl.program_id(0)
    slot = tl.load(tiles_ptr + tile * 3)
    first = tl.load(tiles_ptr + tile * 3 + 1)
    count = tl.load(tiles_ptr + tile * 3 + 2)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    r = tl.arange(0, BLOCK_R)
    out_ty = out_ptr.dtype.element_ty
    rows_of_b = tl.where(slot >= 0, rank, 0)  # none for a tile of no adapter
    b = tl.load(b_ptr + tl.maximum(slot, 0) * stride_bs + r[:, None] * stride_br
                + cols[None, :], mask=(r[:, None] < rows_of_b) & (cols[None, :] < n),
                other=0.0).to(DOT_DTYPE)  # the tile's slot's B, read once
    for r0 in range(0, TILE, BLOCK_T):
        i = r0 + tl.arange(0, BLOCK_T)
        tok = tl.load(order_ptr + first + i, mask=i < count, other=0)
        real = (i < count) & (tok < num_tokens)
        inside = real[:, None] & (cols[None, :] < n)
        y = tl.load(y_ptr + tok.to(tl.int64)[:, None] * stride_y + cols[None, :], mask=inside,
                    other=0.0).to(tl.float32)
        if slot >= 0:
            h = tl.load(h_ptr + tok.to(tl.int64)[:, None] * stride_h + r[None, :],
                        mask=real[:, None] & (r[None, :] < rank), other=0.0).to(DOT_DTYPE)
            delta = tl.dot(h, b, input_precision="ieee")
            # The delta rounded to the output dtype before the sum, as the reference's
            # matmul does.
            y += delta.to(out_ty).to(tl.float32)
        tl.store(out_ptr + tok.to(tl.int64)[:, None] * stride_out + cols[None, :],
                 y.to(out_ty), mask=inside)


def _num_tiles(num_tokens: int, num_slots: int, tiles: torch.Tensor) -> int:
    """Programs (tiles) a call of `num_tokens` tokens needs: not the buffer's every tile,
    most of which hold the longest step's padding."""
    return min(tiles.shape[0], tiles_for(num_tokens, num_slots))


def _row_block(num_tokens: int) -> int:
    """Rows of a tile taken at once: 16 (tl.dot's smallest) in steps of a few tokens,
    whose tiles are short, else the whole tile."""
    return 16 if num_tokens <= LORA_TILE else LORA_TILE


def shrink_splits(num_tiles: int, k: int, device: torch.device) -> int:
    """Parts of K the shrink's programs split it into: enough for `PROGRAMS_PER_UNIT`
    programs a streaming multiprocessor, each part at least `MIN_SPLIT_K` long."""
    wanted = -(-PROGRAMS_PER_UNIT * parallel_units(device) // num_tiles)
    return max(1, min(wanted, max_shrink_splits(k)))


def max_shrink_splits(k: int) -> int:
    """The most parts the shrink splits K into (each at least `MIN_SPLIT_K` long)."""
    return max(1, k // MIN_SPLIT_K)


def lora_shrink(x: torch.Tensor, a: torch.Tensor, slots: torch.Tensor, order: torch.Tensor,
                tiles: torch.Tensor, *, num_splits: int | None = None,
                launch: TritonLaunch = DEFAULT_LAUNCH) -> torch.Tensor:
    """See `pagoda.ops.reference.lora_shrink`. `num_splits`: parts of K (default
    `shrink_splits`)."""
    num_slots, rank, k = a.shape
    x, a = x.contiguous(), a.contiguous()
    order, tiles = order.to(torch.int32).contiguous(), tiles.to(torch.int32).contiguous()
    num_tokens = x.shape[0]
    out = torch.empty(num_tokens, rank, dtype=x.dtype, device=x.device)
    if not num_tokens:
        return out
    num_tiles = _num_tiles(num_tokens, num_slots, tiles)
    wanted = num_splits or shrink_splits(num_tiles, k, x.device)
    split_len = triton.cdiv(triton.cdiv(k, wanted), BLOCK_K) * BLOCK_K
    splits = triton.cdiv(k, split_len)
    part = (torch.empty(splits, num_tokens, rank, dtype=torch.float32, device=x.device)
            if splits > 1 else out)
    _lora_shrink_kernel[(num_tiles, splits)](
        out, part, x, a, order, tiles, num_tokens, k, rank, split_len, splits, x.stride(0),
        a.stride(0), a.stride(1), out.stride(0), TILE=LORA_TILE,
        BLOCK_T=_row_block(num_tokens), BLOCK_R=pow2(rank, 16), BLOCK_K=BLOCK_K,
        DOT_DTYPE=dot_dtype(x.dtype, _lora_shrink_kernel), **launch.gemv.kwargs())
    if splits > 1:  # out [T, R] and each split's part [T, R]: one row of T x R sums
        sum_splits(out.view(1, -1), part.view(splits, 1, -1), None, splits,
                   most=max(splits, max_shrink_splits(k)), launch=launch, dependent=False)
    return out


def lora_expand(y: torch.Tensor, h: torch.Tensor, b: torch.Tensor, slots: torch.Tensor,
                order: torch.Tensor, tiles: torch.Tensor, *,
                launch: TritonLaunch = DEFAULT_LAUNCH) -> torch.Tensor:
    """See `pagoda.ops.reference.lora_expand`."""
    num_slots, rank, n = b.shape
    y, h, b = y.contiguous(), h.contiguous(), b.contiguous()
    order, tiles = order.to(torch.int32).contiguous(), tiles.to(torch.int32).contiguous()
    out = torch.empty_like(y)
    if y.shape[0]:
        grid = (_num_tiles(y.shape[0], num_slots, tiles), triton.cdiv(n, BLOCK_N))
        _lora_expand_kernel[grid](
            out, y, h, b, order, tiles, y.shape[0], n, rank, y.stride(0), h.stride(0),
            b.stride(0), b.stride(1), out.stride(0), TILE=LORA_TILE,
            BLOCK_T=_row_block(y.shape[0]), BLOCK_R=pow2(rank, 16), BLOCK_N=BLOCK_N,
            DOT_DTYPE=dot_dtype(y.dtype, _lora_expand_kernel), **launch.gemv.kwargs())
    return out
