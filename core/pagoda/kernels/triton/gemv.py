"""Matmuls of a few rows, as in decode steps: y = x W^T (+ b), x [M, K], W [N, K] row-major.

With a few rows a linear layer reads its whole weight for little arithmetic: its time is
the time to stream W. Each program owns BLOCK_N output columns (rows of W) and walks K in
[BLOCK_N, BLOCK_K] tiles, K contiguous:

- up to FMA_MAX_ROWS rows, products accumulate in float32 registers, one per (row of W,
  row of x, k lane), and are summed over K once, at the end;
- with more rows the tile is the left operand of `tl.dot` (x, padded to 16 rows, the right
  one), so tensor cores do the arithmetic.

One row on the register path may also be given as the inputs of the op before the matmul
(`row_input.RowInput`: RMSNorm with or without the residual add, SiLU-and-mul), which the
kernel then computes itself, and rotate the heads of its output (`row_rotary.RowRotary`).

When the output has too few column tiles to give every multiprocessor work, K is split
across programs that write float32 partial sums, which a second kernel adds in a fixed
order: results do not depend on timing (no atomics). Above SERVED_ROWS rows torch's
matmul serves (cuBLAS is as fast or faster there). Launch choices come from (M, N, K), the device's
multiprocessor count and the platform's launch parameters alone: nothing is tuned or
synchronised at call time, so calls can be captured in device graphs.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from pagoda.kernels.triton.common import (
    dot_dtype,
    parallel_units,
    pow2,
    unit_last_stride,
    wait_for_prior_kernels,
)
from pagoda.kernels.triton.launch import DEFAULT_LAUNCH, TritonLaunch
from pagoda.kernels.triton.row_input import PLAIN, RowInput, row_scale, row_values
from pagoda.kernels.triton.row_rotary import (
    RowRotary,
    rotary_args,
    rotary_constants,
    rotary_tile_rows,
    rotate_tile,
)

MAX_ROWS = 16
"""Most rows of x the kernel takes (`linear_with`)."""

SERVED_ROWS = 1
"""Most rows `linear` sends to the kernel; torch serves more. Measured on an H200 over the
matmuls of a Llama-3-8B decode step: the kernel beats cuBLAS at one row (1.05x), not at
2 to 16 (0.84x to 0.98x) (docs/benchmarks.md, G)."""

FMA_MAX_ROWS = 4
"""Most rows multiplied in registers; more go through tl.dot."""

KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

FMA_BLOCK_N = 8
FMA_ACCUMULATORS = 8192
"""Float32 accumulators per program of the register path (64 a thread at 4 warps)."""

FMA_MAX_BLOCK_K = 512

DOT_ROWS = 16
"""tl.dot wants 16 or more along every dimension: x is padded to 16 rows."""

DOT_BLOCK_NS = (64, 32, 16)
"""Column tiles of the tl.dot path, widest first: the widest that still gives every
multiprocessor a program (wider tiles re-read x less often)."""

DOT_TILE_BYTES = 8192
"""Weight bytes per tl.dot step: BLOCK_K = DOT_TILE_BYTES // (BLOCK_N * element size)."""

MIN_SPLIT_K = 512
"""Fewest K elements worth a split of their own."""

MAX_SPLITS = 8

SUM_BLOCK = 1024
"""Output columns per program of the kernel that adds the splits' partial sums."""


@dataclass(frozen=True)
class GemvPlan:
    """How one matmul is launched: column and K tiles, path, K splits, launch parameters."""

    block_n: int
    block_k: int
    use_dot: bool
    num_splits: int = 1
    num_warps: int = 4
    num_stages: int = 3

    @property
    def label(self) -> str:
        path = "dot" if self.use_dot else "fma"
        return (f"{path} n{self.block_n} k{self.block_k} split{self.num_splits} "
                f"w{self.num_warps} s{self.num_stages}")


def num_k_splits(column_tiles: int, k: int, units: int) -> int:
    """How many K ranges to run in parallel: more than one only when the column tiles would
    leave some of the `units` multiprocessors idle; then enough for two programs each."""
    if column_tiles >= units:
        return 1
    return max(1, min(triton.cdiv(2 * units, column_tiles), k // MIN_SPLIT_K, MAX_SPLITS))


@functools.cache
def plan_gemv(m: int, n: int, k: int, units: int, itemsize: int = 2,
              launch: TritonLaunch = DEFAULT_LAUNCH) -> GemvPlan:
    """The launch of an [m, k] x [n, k]^T matmul of `itemsize`-byte floats on a device of
    `units` multiprocessors; `launch.gemv` overrides the warps and stages chosen here."""
    if m > FMA_MAX_ROWS:
        block_n = next((b for b in DOT_BLOCK_NS if triton.cdiv(n, b) >= units), DOT_BLOCK_NS[-1])
        block_k, use_dot, stages = DOT_TILE_BYTES // (block_n * itemsize), True, 4
    else:
        block_n, use_dot, stages = FMA_BLOCK_N, False, 3
        block_k = min(FMA_MAX_BLOCK_K, FMA_ACCUMULATORS // (block_n * pow2(m)))
    block_k = min(block_k, pow2(k, 16))
    splits = num_k_splits(triton.cdiv(n, block_n), k, units)
    return GemvPlan(block_n, block_k, use_dot, splits, launch.gemv.num_warps or 4,
                    launch.gemv.num_stages or stages)


# M changes with the batch: left unspecialised, so that 2..16 rows share compiled variants.
@triton.jit(do_not_specialize=["M"])
def _gemv_kernel(
    out_ptr, part_ptr, x_ptr, w_ptr, bias_ptr, r_ptr, nw_ptr, sum_ptr, eps,
    positions_ptr, cos_sin_ptr, stride_cs, rotated_rows, M, N, K,
    split_len, stride_om, stride_xm, stride_wn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
    USE_DOT: tl.constexpr, DOT_DTYPE: tl.constexpr, HAS_BIAS: tl.constexpr,
    NUM_SPLITS: tl.constexpr, STAGES: tl.constexpr, INPUT: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr, NORM_BLOCK: tl.constexpr, ROTARY: tl.constexpr,
    IS_NEOX: tl.constexpr, HEAD_SIZE: tl.constexpr, PDL: tl.constexpr,
):
    """Columns [BLOCK_N * program 0, +BLOCK_N) of x W^T over the K range of split
    `program 1`: the output, or float32 partial sums [NUM_SPLITS, M, N] to be added. For
    one row on the register path x may be a `RowInput` other than PLAIN (r_ptr, nw_ptr,
    sum_ptr and eps are its other arguments), and the output's heads rotated (ROTARY, a
    `RowRotary`: positions_ptr to rotated_rows)."""
    wait_for_prior_kernels(PDL)
    split = tl.program_id(1)
    inv_rms = row_scale(x_ptr, r_ptr, nw_ptr, sum_ptr, K, eps, INPUT, HAS_RESIDUAL, NORM_BLOCK)
    n = rotary_tile_rows(tl.program_id(0), BLOCK_N, ROTARY, HEAD_SIZE, IS_NEOX)
    m = tl.arange(0, BLOCK_M)
    k = tl.arange(0, BLOCK_K)
    n_ok = n < N
    m_ok = m < M
    # Columns past N read row N - 1 of W (never stored), so weight loads need no row mask.
    w_tile = w_ptr + tl.minimum(n, N - 1).to(tl.int64)[:, None] * stride_wn + k[None, :]
    x_tile = x_ptr + m[:, None] * stride_xm + k[None, :]
    lo = split * split_len
    hi = tl.minimum(lo + split_len, K)
    if USE_DOT:
        acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    elif BLOCK_M == 1:
        acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    else:
        acc = tl.zeros([BLOCK_N, BLOCK_M, BLOCK_K], dtype=tl.float32)
    # Stages named on the loop: Triton pipelines the loads of a loop without tl.dot only then.
    for start in tl.range(lo, hi, BLOCK_K, num_stages=STAGES):
        if EVEN_K:
            w = tl.load(w_tile + start)
        else:
            w = tl.load(w_tile + start, mask=(start + k < hi)[None, :], other=0.0)
        if INPUT != PLAIN:  # one row (BLOCK_M == 1): the op before computed here
            x = row_values(x_ptr, r_ptr, nw_ptr, start + k[None, :], (start + k < hi)[None, :],
                           inv_rms, K, INPUT, HAS_RESIDUAL)
        elif EVEN_K:
            x = tl.load(x_tile + start, mask=m_ok[:, None], other=0.0)
        else:
            x = tl.load(x_tile + start, mask=m_ok[:, None] & (start + k < hi)[None, :], other=0.0)
        if USE_DOT:
            acc = tl.dot(w.to(DOT_DTYPE), tl.trans(x.to(DOT_DTYPE)), acc, input_precision="ieee")
        elif BLOCK_M == 1:
            acc += w.to(tl.float32) * x.to(tl.float32)
        else:
            acc += w.to(tl.float32)[:, None, :] * x.to(tl.float32)[None, :, :]
    if USE_DOT:
        y = acc
    elif BLOCK_M == 1:
        y = tl.sum(acc, axis=1)[:, None]
    else:
        y = tl.sum(acc, axis=2)
    keep = n_ok[:, None] & m_ok[None, :]  # y is [BLOCK_N, BLOCK_M]
    if NUM_SPLITS == 1:
        if HAS_BIAS:
            y += tl.load(bias_ptr + n, mask=n_ok, other=0.0).to(tl.float32)[:, None]
        if ROTARY:  # one row
            y = rotate_tile(tl.reshape(y, (BLOCK_N,)), tl.program_id(0), positions_ptr,
                            cos_sin_ptr, stride_cs, rotated_rows, out_ptr.dtype.element_ty,
                            BLOCK_N, HEAD_SIZE, IS_NEOX)[:, None]
        tl.store(out_ptr + m[None, :] * stride_om + n[:, None], y.to(out_ptr.dtype.element_ty),
                 mask=keep)
    else:
        tl.store(part_ptr + (split * M + m[None, :]) * N + n[:, None], y, mask=keep)


@triton.jit(do_not_specialize=["M", "num_splits"])
def _sum_splits_kernel(
    out_ptr, part_ptr, bias_ptr, M, N, stride_om, num_splits,
    HAS_BIAS: tl.constexpr, NUM_SPLITS: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr,
):
    """Row `program 0` of the output: the first `num_splits` (at most NUM_SPLITS) splits'
    partial sums added in split order (+ b). A caller whose split count changes from call
    to call passes its largest as NUM_SPLITS, so one compiled kernel serves every call."""
    wait_for_prior_kernels(PDL)
    m = tl.program_id(0)
    n = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = n < N
    y = tl.zeros([BLOCK], dtype=tl.float32)
    for split in tl.static_range(NUM_SPLITS):  # unrolled: every load in flight at once
        used = tl.full([BLOCK], split, tl.int32) < num_splits
        y += tl.load(part_ptr + (split * M + m) * N + n, mask=ok & used, other=0.0)
    if HAS_BIAS:
        y += tl.load(bias_ptr + n, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + m * stride_om + n, y.to(out_ptr.dtype.element_ty), mask=ok)


def sum_splits(out2: torch.Tensor, part: torch.Tensor, bias: torch.Tensor | None,
               splits: int, *, most: int | None = None, launch: TritonLaunch = DEFAULT_LAUNCH,
               dependent: bool = True) -> None:
    """out2 [M, N] = the `splits` float32 partial sums part [splits, M, N] added in split
    order (+ bias), by `_sum_splits_kernel` with `launch`'s elementwise parameters and, if
    `dependent`, its dependent launch. `most`: the largest split count calls like this one
    use, where it changes from call to call (one compiled kernel serves them all)."""
    m, n = out2.shape
    block = min(pow2(n), SUM_BLOCK)
    _sum_splits_kernel[(m, triton.cdiv(n, block))](
        out2, part, bias if bias is not None else part, m, n, out2.stride(0), splits,
        HAS_BIAS=bias is not None, NUM_SPLITS=most or splits, BLOCK=block,
        **launch.elementwise.kwargs(), **(launch.dependency("reduce") if dependent else {"PDL": False}))


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
           launch: TritonLaunch = DEFAULT_LAUNCH) -> torch.Tensor:
    """See `pagoda.ops.reference.linear`. The kernel serves up to SERVED_ROWS rows of 16-
    or 32-bit floats times a weight of the same type; torch serves everything else."""
    k, n = x.shape[-1], weight.shape[0]
    m = math.prod(x.shape[:-1])
    if not (0 < m <= SERVED_ROWS and k and x.dtype == weight.dtype and x.dtype in KERNEL_DTYPES):
        return F.linear(x, weight, bias)
    plan = plan_gemv(m, n, k, parallel_units(x.device), x.element_size(), launch)
    return linear_with(x, weight, bias, plan, launch=launch)


def linear_with(x: torch.Tensor | RowInput, weight: torch.Tensor, bias: torch.Tensor | None,
                plan: GemvPlan, *, launch: TritonLaunch = DEFAULT_LAUNCH,
                rotary: RowRotary | None = None) -> torch.Tensor:
    """`linear` through the kernel as `plan` says, for up to MAX_ROWS rows and any K and N
    (tests and benchmarks), or for one row on the register path (`plan_gemv(1, ...)`) the
    row a `RowInput` describes, the output's heads rotated as `rotary` says (`RowRotary.
    fits` the plan); of `launch`, the kernels take its dependent launch, and the kernel
    that adds split partial sums its row-kernel parameters."""
    row = x if isinstance(x, RowInput) else RowInput.plain(x)
    x2, k, n = row.x, row.width, weight.shape[0]
    m = x2.shape[0]
    assert m <= MAX_ROWS, f"{m} rows: the gemv kernel takes at most {MAX_ROWS}"
    assert (row.kind == PLAIN and rotary is None) or (m == 1 and not plan.use_dot), (
        "a row input or rotary takes one row on the register path")
    shape = x.shape[:-1] if isinstance(x, torch.Tensor) else (1,)
    out = torch.empty((*shape, n), dtype=x2.dtype, device=x2.device)
    out2 = out.view(-1, n)
    if m == 0 or n == 0:
        return out
    w = unit_last_stride(weight)
    b = unit_last_stride(bias) if bias is not None else out2  # a placeholder when unused
    split_len = triton.cdiv(triton.cdiv(k, plan.num_splits), plan.block_k) * plan.block_k
    splits = triton.cdiv(k, split_len)
    part = (torch.empty((splits, m, n), dtype=torch.float32, device=x2.device)
            if splits > 1 else out2)
    _gemv_kernel[(triton.cdiv(n, plan.block_n), splits)](
        out2, part, x2, w, b, *row.kernel_args()[1:],
        *rotary_args(rotary, out2), m, n, k, split_len,
        out2.stride(0), x2.stride(0), w.stride(0),
        BLOCK_M=DOT_ROWS if plan.use_dot else pow2(m), BLOCK_N=plan.block_n,
        BLOCK_K=plan.block_k, EVEN_K=k % plan.block_k == 0, USE_DOT=plan.use_dot,
        DOT_DTYPE=dot_dtype(x2.dtype, _gemv_kernel), HAS_BIAS=bias is not None,
        NUM_SPLITS=splits, STAGES=plan.num_stages, **row.kernel_constants(),
        **rotary_constants(rotary),
        num_warps=plan.num_warps, num_stages=plan.num_stages, **launch.dependency("gemv"),
    )
    if splits > 1:
        sum_splits(out2, part, bias, splits, launch=launch)
    return out
