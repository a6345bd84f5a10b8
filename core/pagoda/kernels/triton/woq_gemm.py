"""Weight-only quantized matmuls: y = x W^T (+ b) with W [N, K] stored as 4- or 8-bit codes,
a scale and an offset per row and group of GROUP inputs: W[n, k] = code * s[n, g] + o[n, g]
(`pagoda.quant.tensors.GroupQuantWeight`), x not quantized.

Layout (`PackedGroupWeight`, made once by `pack`): the codes as int32 words [N, K * bits / 32]
(see `quant_prims` for the order of the codes in a word), scales and offsets [N, K / GROUP]
contiguous, in the canonical weight's own float type (they are read in float32).

Two kernels:

- `_woq_gemv_kernel`, a few rows (decode): each program streams BLOCK_N rows of packed
  words, [BLOCK_N, BLOCK_K] weights a step (BLOCK_K a multiple of GROUP), dequantizes them
  in float32 registers (code * s + o) and accumulates products per (row, k lane), summed
  over K once at the end, as the bf16 gemv's register path does; no reduction inside the
  loop (a per-group reduction compiled to shuffles and barriers every step). K splits as
  in `gemv.py`.
- `_woq_gemm_kernel`, any number of rows: [BLOCK_M, BLOCK_N] output tiles; each K tile of
  W is dequantized to the model's 16-bit type (float32 for float32 models) and multiplied
  with `tl.dot`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from pagoda.kernels.triton.common import (
    GemvTiles,
    dot_dtype,
    grouped_tile,
    parallel_units,
    pow2,
    wait_for_prior_kernels,
)
from pagoda.kernels.triton.gemv import num_k_splits, sum_splits
from pagoda.kernels.triton.launch import DEFAULT_LAUNCH, TritonLaunch
from pagoda.kernels.triton.quant_prims import biased_unit, pack_codes, unpack_biased
from pagoda.kernels.triton.row_input import PLAIN, RowInput, row_scale, row_values
from pagoda.kernels.triton.row_rotary import (
    RowRotary,
    rotary_args,
    rotary_constants,
    rotary_tile_rows,
    rotate_tile,
)
from pagoda.quant.tensors import GroupQuantWeight

GEMV_MAX_ROWS = 8
FMA_ELEMENTS = 8192
"""Products held per program and step of the gemv (BLOCK_N x rows x BLOCK_K)."""


@dataclass(frozen=True)
class PackedGroupWeight:
    """A `GroupQuantWeight` in the kernels' layout (see the module docstring)."""

    words: torch.Tensor
    scales: torch.Tensor
    offsets: torch.Tensor
    bits: int
    group_size: int
    act_block: int | None = None
    """`GroupQuantWeight.act_block`: `quant_linear.woq_linear` rounds x before the kernels."""

    @property
    def shape(self) -> tuple[int, int]:
        return self.words.shape[0], self.words.shape[1] * (32 // self.bits)


def pack(weight: GroupQuantWeight) -> PackedGroupWeight:
    """The kernels' layout of `weight` (its K must be a multiple of 32 / bits)."""
    return PackedGroupWeight(pack_codes(weight.codes, weight.bits),
                             weight.scales.contiguous(), weight.offsets.contiguous(),
                             weight.bits, weight.group_size, weight.act_block)


def plan_woq_gemv(m: int, n: int, k: int, group: int, units: int) -> GemvTiles:
    """Eight weight rows a program, K tiles of up to FMA_ELEMENTS / (8 x rows) (at least a
    group), split K when the column tiles leave multiprocessors idle."""
    block_n = 8
    block_k = max(group, min(1024, FMA_ELEMENTS // (block_n * pow2(m)), pow2(k)))
    return GemvTiles(block_n, block_k, num_k_splits(triton.cdiv(n, block_n), k, units))


@dataclass(frozen=True)
class WoqGemmPlan:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 3


def plan_woq_gemm(m: int, n: int, group: int) -> WoqGemmPlan:
    bm = min(128, pow2(m, 16))
    bn = 128 if m > 64 else 64
    return WoqGemmPlan(bm, bn, max(group, 64), 8 if bm * bn >= 128 * 128 else 4, 3)


@triton.jit
def _dequantize(words, s, o, BITS: tl.constexpr, GROUP: tl.constexpr):
    """int32 words [R, W] -> float32 weights code * s + o [R, W * 32 // BITS], s and o
    float32 [R, C / GROUP] (one a group): from biased codes v = 1 + code / u
    (`unpack_biased`), w = v * (u s) + (o - u s), one multiply-add a weight."""
    codes = unpack_biased(words, BITS)
    R: tl.constexpr = codes.shape[0]
    C: tl.constexpr = codes.shape[1]
    s = s * biased_unit(BITS)
    o = o - s
    if C == GROUP:
        w = codes * s + o
    else:
        w = tl.reshape(tl.reshape(codes, (R, C // GROUP, GROUP)) * s[:, :, None] + o[:, :, None],
                       (R, C))
    return w


@triton.jit(do_not_specialize=["M"])
def _woq_gemv_kernel(
    out_ptr, part_ptr, x_ptr, r_ptr, nw_ptr, sum_ptr, eps, positions_ptr, cos_sin_ptr,
    stride_cs, rotated_rows, w_ptr, s_ptr, o_ptr, bias_ptr,
    M, N, K, KW, split_words, stride_om, stride_xm, stride_wn, stride_sn,
    BITS: tl.constexpr, GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, HAS_BIAS: tl.constexpr, NUM_SPLITS: tl.constexpr,
    STAGES: tl.constexpr, INPUT: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
    NORM_BLOCK: tl.constexpr, ROTARY: tl.constexpr, IS_NEOX: tl.constexpr,
    HEAD_SIZE: tl.constexpr, PDL: tl.constexpr,
):
    """Columns [BLOCK_N * program 0, +BLOCK_N) of x W^T over the words of split
    `program 1` (KW words a row): the output, or float32 partial sums [NUM_SPLITS, M, N].
    The loop counts words, so that the alignment of word offsets is known (16-byte loads).
    For one row x may be a `RowInput` other than PLAIN (r_ptr, nw_ptr, sum_ptr and eps are
    its other arguments), and the output's heads rotated (ROTARY, a `RowRotary`:
    positions_ptr to rotated_rows)."""
    wait_for_prior_kernels(PDL)
    PACK: tl.constexpr = 32 // BITS
    GROUPS: tl.constexpr = BLOCK_K // GROUP
    split = tl.program_id(1)
    inv_rms = row_scale(x_ptr, r_ptr, nw_ptr, sum_ptr, K, eps, INPUT, HAS_RESIDUAL, NORM_BLOCK)
    n = rotary_tile_rows(tl.program_id(0), BLOCK_N, ROTARY, HEAD_SIZE, IS_NEOX)
    m = tl.arange(0, BLOCK_M)
    j = tl.arange(0, BLOCK_K // PACK)
    k = tl.arange(0, BLOCK_K)
    g = tl.arange(0, GROUPS)
    n_ok = n < N
    m_ok = m < M
    nc = tl.minimum(n, N - 1)
    w_tile = w_ptr + nc.to(tl.int64)[:, None] * stride_wn + j[None, :]
    s_tile = nc.to(tl.int64)[:, None] * stride_sn + g[None, :]
    x_tile = x_ptr + m[:, None] * stride_xm + k[None, :]
    lo = split * split_words
    hi = tl.minimum(lo + split_words, KW)
    if BLOCK_M == 1:
        acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    else:
        acc = tl.zeros([BLOCK_N, BLOCK_M, BLOCK_K], dtype=tl.float32)
    for word in tl.range(lo, hi, BLOCK_K // PACK, num_stages=STAGES):
        start = word * PACK
        # K is whole groups: a step is whole groups, some of them past K at the end
        g_ok = (start // GROUP + g < K // GROUP)[None, :]
        words = tl.load(w_tile + word, mask=(word + j < hi)[None, :], other=0)
        s = tl.load(s_ptr + s_tile + start // GROUP, mask=g_ok, other=0.0).to(tl.float32)
        o = tl.load(o_ptr + s_tile + start // GROUP, mask=g_ok, other=0.0).to(tl.float32)
        w = _dequantize(words, s, o, BITS, GROUP)
        if INPUT != PLAIN:  # one row (BLOCK_M == 1): the op before computed here
            x = row_values(x_ptr, r_ptr, nw_ptr, start + k[None, :],
                           (start + k < hi * PACK)[None, :], inv_rms, K, INPUT, HAS_RESIDUAL)
        else:
            x = tl.load(x_tile + start, mask=m_ok[:, None] & (start + k < hi * PACK)[None, :],
                        other=0.0)
        if BLOCK_M == 1:
            acc += w * x.to(tl.float32)
        else:
            acc += w[:, None, :] * x.to(tl.float32)[None, :, :]
    acc = tl.sum(acc, axis=1)[:, None] if BLOCK_M == 1 else tl.sum(acc, axis=2)
    keep = n_ok[:, None] & m_ok[None, :]
    if NUM_SPLITS == 1:
        if HAS_BIAS:
            acc += tl.load(bias_ptr + nc).to(tl.float32)[:, None]
        if ROTARY:  # one row
            acc = rotate_tile(tl.reshape(acc, (BLOCK_N,)), tl.program_id(0), positions_ptr,
                              cos_sin_ptr, stride_cs, rotated_rows, out_ptr.dtype.element_ty,
                              BLOCK_N, HEAD_SIZE, IS_NEOX)[:, None]
        tl.store(out_ptr + m[None, :] * stride_om + n[:, None],
                 acc.to(out_ptr.dtype.element_ty), mask=keep)
    else:
        tl.store(part_ptr + (split * M + m[None, :]) * N + n[:, None], acc, mask=keep)


@triton.jit(do_not_specialize=["M"])
def _woq_gemm_kernel(
    out_ptr, x_ptr, w_ptr, s_ptr, o_ptr, bias_ptr, M, N, K,
    stride_om, stride_xm, stride_wn, stride_sn,
    BITS: tl.constexpr, GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, DOT_DTYPE: tl.constexpr,
    HAS_BIAS: tl.constexpr,
):
    """One [BLOCK_M, BLOCK_N] tile of x W^T (BLOCK_K a multiple of GROUP); tiles in
    groups of GROUP_M row tiles, as in `scaled_gemm._qgemm_kernel`."""
    PACK: tl.constexpr = 32 // BITS
    GROUPS: tl.constexpr = BLOCK_K // GROUP
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    j = tl.arange(0, BLOCK_K // PACK)
    k = tl.arange(0, BLOCK_K)
    g = tl.arange(0, GROUPS)
    mc = tl.minimum(m, M - 1)
    nc = tl.minimum(n, N - 1)
    x_tile = x_ptr + mc.to(tl.int64)[:, None] * stride_xm + k[None, :]
    w_tile = w_ptr + nc.to(tl.int64)[:, None] * stride_wn + j[None, :]
    s_tile = nc.to(tl.int64)[:, None] * stride_sn + g[None, :]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        g_ok = (start // GROUP + g < K // GROUP)[None, :]
        words = tl.load(w_tile + start // PACK, mask=(start + j * PACK < K)[None, :], other=0)
        s = tl.load(s_ptr + s_tile + start // GROUP, mask=g_ok, other=0.0).to(tl.float32)
        o = tl.load(o_ptr + s_tile + start // GROUP, mask=g_ok, other=0.0).to(tl.float32)
        w = _dequantize(words, s, o, BITS, GROUP)
        x = tl.load(x_tile + start, mask=(start + k < K)[None, :], other=0.0)
        acc = tl.dot(x.to(DOT_DTYPE), tl.trans(w.to(DOT_DTYPE)), acc, input_precision="ieee")
    if HAS_BIAS:
        acc += tl.load(bias_ptr + nc).to(tl.float32)[None, :]
    keep = (m < M)[:, None] & (n < N)[None, :]
    tl.store(out_ptr + m.to(tl.int64)[:, None] * stride_om + n[None, :],
             acc.to(out_ptr.dtype.element_ty), mask=keep)


def woq_gemv(out2: torch.Tensor, x2: torch.Tensor | RowInput, weight: PackedGroupWeight,
             bias: torch.Tensor | None, plan: GemvTiles | None = None, *,
             launch: TritonLaunch = DEFAULT_LAUNCH,
             rotary: RowRotary | None = None) -> torch.Tensor:
    """`_woq_gemv_kernel` into out2 [M, N] (M up to GEMV_MAX_ROWS, or one row a `RowInput`
    describes, its heads rotated as `rotary` says: `RowRotary.fits` the plan), launched
    with `launch`'s dependent launch."""
    row = x2 if isinstance(x2, RowInput) else RowInput.plain(x2)
    m, k = row.x.shape[0], row.width
    n = weight.words.shape[0]
    group = weight.group_size
    plan = plan or plan_woq_gemv(m, n, k, group, parallel_units(row.x.device))
    assert plan.block_k % group == 0, "the gemv's K tile is whole groups"
    split_len = triton.cdiv(triton.cdiv(k, plan.num_splits), plan.block_k) * plan.block_k
    splits = triton.cdiv(k, split_len)
    part = (torch.empty((splits, m, n), dtype=torch.float32, device=row.x.device)
            if splits > 1 else out2)
    b = bias if bias is not None else weight.scales
    _woq_gemv_kernel[(triton.cdiv(n, plan.block_n), splits)](
        out2, part, *row.kernel_args(), *rotary_args(rotary, out2), weight.words,
        weight.scales, weight.offsets, b, m, n, k, weight.words.shape[1],
        split_len * weight.bits // 32, out2.stride(0), row.x.stride(0),
        weight.words.stride(0), weight.scales.stride(0),
        BITS=weight.bits, GROUP=group, BLOCK_M=pow2(m), BLOCK_N=plan.block_n,
        BLOCK_K=plan.block_k, HAS_BIAS=bias is not None, NUM_SPLITS=splits,
        STAGES=plan.num_stages, **row.kernel_constants(), **rotary_constants(rotary),
        num_warps=plan.num_warps, num_stages=plan.num_stages, **launch.dependency("gemv"),
    )
    if splits > 1:
        sum_splits(out2, part, bias, splits, launch=launch)
    return out2


def woq_gemm(out2: torch.Tensor, x2: torch.Tensor, weight: PackedGroupWeight,
             bias: torch.Tensor | None, plan: WoqGemmPlan | None = None) -> torch.Tensor:
    """`_woq_gemm_kernel` into out2 [M, N]."""
    m, k = x2.shape
    n = weight.words.shape[0]
    plan = plan or plan_woq_gemm(m, n, weight.group_size)
    assert plan.block_k % weight.group_size == 0, "the gemm's K tile is whole groups"
    grid = (triton.cdiv(m, plan.block_m) * triton.cdiv(n, plan.block_n),)
    _woq_gemm_kernel[grid](
        out2, x2, weight.words, weight.scales, weight.offsets,
        bias if bias is not None else weight.scales, m, n, k, out2.stride(0), x2.stride(0),
        weight.words.stride(0), weight.scales.stride(0), BITS=weight.bits,
        GROUP=weight.group_size, BLOCK_M=plan.block_m, BLOCK_N=plan.block_n,
        BLOCK_K=plan.block_k, GROUP_M=8, DOT_DTYPE=dot_dtype(x2.dtype, _woq_gemm_kernel),
        HAS_BIAS=bias is not None, num_warps=plan.num_warps, num_stages=plan.num_stages,
    )
    return out2
