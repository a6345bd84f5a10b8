"""Weight-only 4-bit matmul of a few rows on tensor cores: y = x W^T (+ b) for x of up to
DOT_MAX_ROWS rows of 16-bit floats, W a `PackedGroupWeight` of 4-bit codes (W[n, k] =
code * s[n, g] + o[n, g], g = k // GROUP).

The register gemv (`woq_gemm._woq_gemv_kernel`) multiplies every weight by every row on
the CUDA cores: its time grows with the rows (on the H100, 80 us a layer of the 8B shapes
at one row, 168 at four, 273 at eight). This kernel leaves the products to the tensor
cores, 16 rows at the cost of one, and never scales a weight. Over a group, with X =
sum_k x[k] and M a magic constant,

    sum_k (code_k * s + o) x[k] = s * (sum_k (M + code_k) x[k]) + (o - M * s) * X

and M + code is a 16-bit float made from the code by OR-ing it into M's mantissa (M = 128
in bfloat16, 1024 in float16: one unit in the last place there), two codes of a word at
once, by one shift and one logical op per pair. Each group's sum is one `tl.dot` of the
weight rows' codes [BLOCK_N, GROUP] with x^T [GROUP, 16] (x's rows padded to 16 with
zeros): the products (M + code) x are exact in float32 and summed in float32, then scaled
per row and group in float32. The result equals the reference (dequantized weight times x,
float32) to float32 rounding.

A program takes BLOCK_N weight rows and GROUPS_PER_STEP groups a loop step; K splits as in
`gemv.py` when the row tiles leave multiprocessors idle, the splits' float32 partial sums
added by `gemv.sum_splits`.

Measured (ci/bench_quant_kernels.py, H100): ~150 us a layer at any row count up to 16
(0.8-0.9 TB/s of packed weights), so it serves 3 to 16 rows (`quant_linear`). What keeps it
from the memory's speed is Triton's code for it: the unpacked codes go through shared
memory to reach the tensor cores' operand layout, behind barriers, every group.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.kernels.triton.common import (
    GemvTiles,
    dot_dtype,
    parallel_units,
    wait_for_prior_kernels,
)
from pagoda.kernels.triton.gemv import num_k_splits, sum_splits
from pagoda.kernels.triton.launch import DEFAULT_LAUNCH, TritonLaunch
from pagoda.kernels.triton.woq_gemm import PackedGroupWeight

DOT_MAX_ROWS = 16
"""Rows of x the kernel takes: one tensor-core tile of them."""
MAGIC = {torch.bfloat16: (0x4300, 128.0), torch.float16: (0x6400, 1024.0)}
"""16-bit float type -> (bits, value) of the M whose last mantissa bit is worth one (in the
kernel MAGIC_BITS and MAGIC_VALUE)."""


def woq_dot_supports(x: torch.Tensor, weight: PackedGroupWeight) -> bool:
    """Whether `woq_dot` takes x [M, K] times `weight`: 4-bit codes, 16-bit x, M rows up
    to DOT_MAX_ROWS, groups of at least 16 (one tensor-core K step)."""
    return (weight.bits == 4 and x.dtype in MAGIC and 0 < x.shape[0] <= DOT_MAX_ROWS
            and weight.group_size >= 16)


def plan_woq_dot(n: int, k: int, group: int, units: int) -> GemvTiles:
    """128 weight rows a program, 256 inputs a step (one group when larger), 8 warps, 3
    stages: the best of the launches ci/bench_quant_kernels.py tried on the 8B shapes (H100,
    every row count up to 16); K split when fewer row tiles than twice the multiprocessors."""
    block_n = 128
    return GemvTiles(block_n, max(256, group), num_k_splits(triton.cdiv(n, block_n), k, units),
                     8, 3)


@triton.jit
def _magic_codes(words, shift: tl.constexpr, MAGIC_BITS: tl.constexpr):
    """Codes at bit `shift` (low half) and `shift + 16` (high half) of every int32 word,
    each OR-ed into the 16-bit float M: (low, high) as int16 bit patterns."""
    both = ((words >> shift) & 0x000F000F) | (MAGIC_BITS * 0x10001)
    return both.to(tl.int16), (both >> 16).to(tl.int16)


@triton.jit
def unpack_magic(words, MAGIC_BITS: tl.constexpr, HALF: tl.constexpr):
    """int32 words [R, W] of 4-bit codes -> M + code [R, 8 W] in K order, as the 16-bit
    float HALF. A word holds code f at bit field bitrev(f) (`quant_prims`): the fields at
    shifts 4j and 4j + 16 are codes bitrev(j) and bitrev(j) + 1, so each pair comes from
    one shift."""
    lo0, hi0 = _magic_codes(words, 0, MAGIC_BITS)  # codes 0, 1
    lo1, hi1 = _magic_codes(words, 4, MAGIC_BITS)  # codes 4, 5
    lo2, hi2 = _magic_codes(words, 8, MAGIC_BITS)  # codes 2, 3
    lo3, hi3 = _magic_codes(words, 12, MAGIC_BITS)  # codes 6, 7
    # the first join's axis is the most significant: code = 4 a0 + 2 a1 + a2
    lows = tl.join(tl.join(lo0, lo1), tl.join(lo2, lo3))
    highs = tl.join(tl.join(hi0, hi1), tl.join(hi2, hi3))
    codes = tl.join(lows, highs).to(HALF, bitcast=True)
    return tl.reshape(codes, (words.shape[0], words.shape[1] * 8))


@triton.jit(do_not_specialize=["M"])
def _woq_dot_kernel(
    out_ptr, part_ptr, x_ptr, w_ptr, s_ptr, o_ptr, bias_ptr,
    M, N, K, split_groups, stride_om, stride_xm, stride_wn, stride_sn,
    MAGIC_BITS: tl.constexpr, MAGIC_VALUE: tl.constexpr, GROUP: tl.constexpr,
    BLOCK_N: tl.constexpr, GROUPS_PER_STEP: tl.constexpr, HAS_BIAS: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    STAGES: tl.constexpr, DOT_DTYPE: tl.constexpr, PDL: tl.constexpr,
):
    """Columns [BLOCK_N * program 0, +BLOCK_N) of x W^T over the groups of split
    `program 1` (split_groups groups each): the output, or float32 partial sums
    [NUM_SPLITS, M, N]."""
    wait_for_prior_kernels(PDL)
    BLOCK_M: tl.constexpr = 16
    WORDS: tl.constexpr = GROUP // 8
    HALF: tl.constexpr = x_ptr.dtype.element_ty
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    m = tl.arange(0, BLOCK_M)
    j = tl.arange(0, WORDS)
    k = tl.arange(0, GROUP)
    n_ok = n < N
    m_ok = m < M
    nc = tl.minimum(n, N - 1).to(tl.int64)
    w_rows = w_ptr + nc[:, None] * stride_wn + j[None, :]
    x_rows = x_ptr + m[:, None] * stride_xm + k[None, :]
    groups = K // GROUP
    lo = tl.program_id(1) * split_groups
    hi = tl.minimum(lo + split_groups, groups)
    acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    for first in tl.range(lo, hi, GROUPS_PER_STEP, num_stages=STAGES):
        for i in tl.static_range(GROUPS_PER_STEP):
            # a step past the split's last group reads that group again and adds nothing
            g = tl.minimum(first + i, hi - 1)
            used = first + i < hi
            words = tl.load(w_rows + g * WORDS)
            x = tl.load(x_rows + g * GROUP, mask=m_ok[:, None], other=0.0)
            s = tl.load(s_ptr + nc * stride_sn + g).to(tl.float32)
            o = tl.load(o_ptr + nc * stride_sn + g).to(tl.float32)
            dots = tl.dot(unpack_magic(words, MAGIC_BITS, HALF).to(DOT_DTYPE),
                          tl.trans(x.to(DOT_DTYPE)), input_precision="ieee")
            x_sum = tl.sum(x.to(tl.float32), axis=1)[None, :]
            s = tl.where(used, s, 0.0)
            o = tl.where(used, o, 0.0)
            acc += s[:, None] * dots + (o - MAGIC_VALUE * s)[:, None] * x_sum
    keep = n_ok[:, None] & m_ok[None, :]
    if NUM_SPLITS == 1:
        if HAS_BIAS:
            acc += tl.load(bias_ptr + nc).to(tl.float32)[:, None]
        tl.store(out_ptr + m[None, :] * stride_om + n[:, None],
                 acc.to(out_ptr.dtype.element_ty), mask=keep)
    else:
        tl.store(part_ptr + (tl.program_id(1) * M + m[None, :]) * N + n[:, None], acc,
                 mask=keep)


def woq_dot(out2: torch.Tensor, x2: torch.Tensor, weight: PackedGroupWeight,
            bias: torch.Tensor | None, plan: GemvTiles | None = None, *,
            launch: TritonLaunch = DEFAULT_LAUNCH) -> torch.Tensor:
    """`_woq_dot_kernel` into out2 [M, N] (`woq_dot_supports` x2 and weight), launched with
    `launch`'s dependent launch; the plan's K tile is the inputs a loop step takes (whole
    groups)."""
    assert woq_dot_supports(x2, weight), "woq_dot takes 4-bit codes times 16-bit rows"
    m, k = x2.shape
    n, group = weight.words.shape[0], weight.group_size
    plan = plan or plan_woq_dot(n, k, group, parallel_units(x2.device))
    assert plan.block_k % group == 0, "a loop step takes whole groups"
    steps = plan.block_k // group
    groups = k // group
    split_groups = triton.cdiv(triton.cdiv(groups, plan.num_splits), steps) * steps
    splits = triton.cdiv(groups, split_groups)
    part = (torch.empty((splits, m, n), dtype=torch.float32, device=x2.device)
            if splits > 1 else out2)
    b = bias if bias is not None else weight.scales
    _woq_dot_kernel[(triton.cdiv(n, plan.block_n), splits)](
        out2, part, x2, weight.words, weight.scales, weight.offsets, b, m, n, k, split_groups,
        out2.stride(0), x2.stride(0), weight.words.stride(0), weight.scales.stride(0),
        MAGIC_BITS=MAGIC[x2.dtype][0], MAGIC_VALUE=MAGIC[x2.dtype][1], GROUP=group,
        BLOCK_N=plan.block_n, GROUPS_PER_STEP=steps, HAS_BIAS=bias is not None,
        NUM_SPLITS=splits, STAGES=plan.num_stages,
        DOT_DTYPE=dot_dtype(x2.dtype, _woq_dot_kernel), num_warps=plan.num_warps,
        num_stages=plan.num_stages, **launch.dependency("gemv"),
    )
    if splits > 1:
        sum_splits(out2, part, bias, splits, launch=launch)
    return out2
