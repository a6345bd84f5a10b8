"""Matmuls of quantized activations and weights (float8 e4m3 or int8, both quantized):
y = (xq * xs) (wq * ws)^T (+ b), W [N, K] row-major, as `pagoda.ops.quant_reference`'s
fp8_linear and int8_linear compute.

Scales. The weight's are per row (ws [N]) or, for a blocked float8 weight, per (bn, bk)
block (ws [ceil(N / bn), ceil(K / bk)]); the activations' per row (dynamic, one per token),
one static scalar, or per row and group of bk inputs (blocked weights). Per-row scales
multiply the accumulated sum once, at the end; blocked ones multiply each K block's
partial sum (the K tile is then the block, bk). Int8 products accumulate exactly in int32.

Two kernels:

- `_qgemv_kernel`, a few rows (decode). Like the bf16 gemv (`gemv.py`), each program owns
  BLOCK_N rows of W and streams them in [BLOCK_N, BLOCK_K] tiles; products accumulate in
  registers (FMA path) or through `tl.dot` with x padded to 16 rows (dot path), and K is
  split across programs when the column tiles leave multiprocessors idle (the splits'
  float32 partial sums are added in a fixed order by gemv's second kernel). It can
  quantize x itself (X_MODE 0: a first pass over the row for its amax, or each K block's
  amax when blocked; 1: a static scale) or take it quantized (X_MODE 2).
- `_qgemm_kernel`, any number of rows: [BLOCK_M, BLOCK_N] output tiles over pre-quantized x
  (`quant_prims.quantize_activations`), K tiles through `tl.dot` on the 8-bit operands.

Under Triton's interpreter float8 operands of `tl.dot` are converted to float32 (exact).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from pagoda.kernels.triton.common import grouped_tile, interpreted, parallel_units, pow2
from pagoda.kernels.triton.gemv import num_k_splits, sum_splits
from pagoda.kernels.triton.quant_prims import MIN_SCALE_C, quantize_fp8, round_int8

GEMV_MAX_ROWS = 16
FUSED_MAX_ROWS = 4
"""Most rows for which each gemv program quantizes x itself (a pass over the whole row of
x per program); more rows are quantized first, once (`quantize_activations`)."""
DOT_ROWS = 16


@dataclass(frozen=True)
class QGemvPlan:
    """Launch of `_qgemv_kernel`: column and K tiles, path, K splits, warps, stages."""

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


def plan_qgemv(m: int, n: int, k: int, units: int, block_k: int | None = None) -> QGemvPlan:
    """The default launch for [m, k] x [n, k]^T on `units` multiprocessors; `block_k` fixes
    the K tile (a blocked weight's bk). One row (a single decode): eight weight rows a
    program through FMAs, K tiles of 512, split over K to fill the GPU (on the H200 it beat
    the dot path by 1.2-1.6x on the 8B's qkv, o and down shapes and tied on gate_up,
    ci/bench_quant_kernels.py). More rows: tiles of 64 weight rows through tl.dot, every
    product on tensor cores, no per-weight conversion; 16 KB of weight a step."""
    if m == 1 and block_k is None:
        return QGemvPlan(8, 512, False, num_k_splits(triton.cdiv(n, 8), k, units), 4, 3)
    block_n = 64 if triton.cdiv(n, 64) >= units else 32
    bk = block_k or min(256, pow2(k, 32))
    splits = num_k_splits(triton.cdiv(n, block_n), k, units)
    return QGemvPlan(block_n, bk, True, splits, 4, 4)


@dataclass(frozen=True)
class QGemmPlan:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 3


def plan_qgemm(m: int, n: int, block_k: int | None = None) -> QGemmPlan:
    """Default tiles of `_qgemm_kernel`: rows to the next power of two up to 128, 128
    columns (64 for up to 64 rows, for more programs), K tiles of 128 bytes."""
    bm = min(128, pow2(m, 16))
    bn = 128 if m > 64 else 64
    return QGemmPlan(bm, bn, block_k or 128, 8 if bm * bn >= 128 * 128 else 4, 3)


@triton.jit
def _quantize(x, xs, INT8: tl.constexpr, EXACT: tl.constexpr):
    """float32 x [BM, BK] / xs [BM] as int8 or float8 codes. Multiplies by the reciprocal
    (a division per element would cost more than the weight's own arithmetic): a value may
    round to the neighbouring step where the reference divides, which the ops allow."""
    v = x * (1.0 / xs)[:, None]
    return round_int8(v).to(tl.int8) if INT8 else quantize_fp8(v, EXACT)


@triton.jit
def _dot(a, b, INT8: tl.constexpr, DOT_F32: tl.constexpr):
    """a [P, BK] times b [Q, BK]^T of 8-bit codes: int32 for int8, else float32."""
    if DOT_F32:
        y = tl.dot(a.to(tl.float32), tl.trans(b.to(tl.float32)), input_precision="ieee")
    elif INT8:
        y = tl.dot(a, tl.trans(b), out_dtype=tl.int32)
    else:
        # promote to float32 after every K tile (the tensor cores' own fp8 sums are short)
        y = tl.dot(a, tl.trans(b), max_num_imprecise_acc=a.shape[1])
    return y


@triton.jit(do_not_specialize=["M"])
def _qgemv_kernel(
    out_ptr, part_ptr, x_ptr, xs_ptr, w_ptr, ws_ptr, bias_ptr, M, N, K, split_len, block_rows,
    stride_om, stride_xm, stride_xsm, stride_wn, stride_wsn,
    INT8: tl.constexpr, X_MODE: tl.constexpr, BLOCKED: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, USE_DOT: tl.constexpr,
    DOT_F32: tl.constexpr, EXACT: tl.constexpr, HAS_BIAS: tl.constexpr,
    NUM_SPLITS: tl.constexpr, STAGES: tl.constexpr,
):
    """Columns [BLOCK_N * program 0, +BLOCK_N) of the output over the K range of split
    `program 1`: the output, or float32 partial sums [NUM_SPLITS, M, N]. x is [M, K] in
    the model's type (X_MODE 0, 1) or codes with scales xs [M, 1] (X_MODE 2)."""
    QMAX: tl.constexpr = 127.0 if INT8 else 448.0
    split = tl.program_id(1)
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    m = tl.arange(0, BLOCK_M)
    k = tl.arange(0, BLOCK_K)
    n_ok = n < N
    m_ok = m < M
    nc = tl.minimum(n, N - 1)  # rows past N read row N - 1, never stored
    w_tile = w_ptr + nc.to(tl.int64)[:, None] * stride_wn + k[None, :]
    x_tile = x_ptr + m[:, None] * stride_xm + k[None, :]
    lo = split * split_len
    hi = tl.minimum(lo + split_len, K)

    xs = tl.full([BLOCK_M], 1.0, tl.float32)
    if X_MODE == 1:
        xs = xs * tl.load(xs_ptr).to(tl.float32)
    elif X_MODE == 2:
        xs = tl.load(xs_ptr + m * stride_xsm, mask=m_ok, other=1.0)
    elif not BLOCKED:  # per-row dynamic scales: a first pass for each row's amax
        amax = tl.zeros([BLOCK_M], dtype=tl.float32)
        for start in range(0, K, BLOCK_K):
            x = tl.load(x_tile + start, mask=m_ok[:, None] & (start + k < K)[None, :], other=0.0)
            amax = tl.maximum(amax, tl.max(tl.abs(x.to(tl.float32)), axis=1))
        xs = tl.math.div_rn(tl.maximum(amax, MIN_SCALE_C * QMAX), QMAX)

    ACC: tl.constexpr = tl.int32 if INT8 and not BLOCKED else tl.float32
    if USE_DOT or BLOCKED:
        acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=ACC)
    elif BLOCK_M == 1:
        acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=ACC)
    else:
        acc = tl.zeros([BLOCK_N, BLOCK_M, BLOCK_K], dtype=ACC)
    for start in tl.range(lo, hi, BLOCK_K, num_stages=STAGES):
        if EVEN_K:
            w = tl.load(w_tile + start)
            x = tl.load(x_tile + start, mask=m_ok[:, None], other=0.0)
        else:
            k_ok = start + k < hi
            w = tl.load(w_tile + start, mask=k_ok[None, :], other=0.0)
            x = tl.load(x_tile + start, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        if X_MODE == 2:
            xq = x
        else:
            xf = x.to(tl.float32)
            if BLOCKED and X_MODE == 0:  # this K block's own scale per row
                xs = tl.math.div_rn(tl.maximum(tl.max(tl.abs(xf), axis=1), MIN_SCALE_C * QMAX), QMAX)
            xq = _quantize(xf, xs, INT8, EXACT)
        if USE_DOT:
            part = _dot(w, xq, INT8, DOT_F32)  # [BLOCK_N, BLOCK_M]
        else:
            wv = w.to(ACC)
            xv = xq.to(ACC)
            if BLOCKED:
                part = tl.sum(wv[:, None, :] * xv[None, :, :], axis=2)
            elif BLOCK_M == 1:
                acc += wv * xv
            else:
                acc += wv[:, None, :] * xv[None, :, :]
        if BLOCKED:
            wsb = tl.load(ws_ptr + (nc // block_rows) * stride_wsn + start // BLOCK_K)
            acc += part.to(tl.float32) * wsb[:, None] * xs[None, :]
        elif USE_DOT:
            acc += part.to(ACC)
    if USE_DOT or BLOCKED:
        y = acc.to(tl.float32)
    elif BLOCK_M == 1:
        y = tl.sum(acc, axis=1).to(tl.float32)[:, None]
    else:
        y = tl.sum(acc, axis=2).to(tl.float32)
    if not BLOCKED:
        y = y * xs[None, :] * tl.load(ws_ptr + nc)[:, None]
    keep = n_ok[:, None] & m_ok[None, :]  # y is [BLOCK_N, BLOCK_M]
    if NUM_SPLITS == 1:
        if HAS_BIAS:
            y += tl.load(bias_ptr + nc).to(tl.float32)[:, None]
        tl.store(out_ptr + m[None, :] * stride_om + n[:, None], y.to(out_ptr.dtype.element_ty),
                 mask=keep)
    else:
        tl.store(part_ptr + (split * M + m[None, :]) * N + n[:, None], y, mask=keep)


@triton.jit(do_not_specialize=["M"])
def _qgemm_kernel(
    out_ptr, xq_ptr, xs_ptr, w_ptr, ws_ptr, bias_ptr, M, N, K, block_rows,
    stride_om, stride_xm, stride_xsm, stride_wn, stride_wsn,
    INT8: tl.constexpr, BLOCKED: tl.constexpr, X_GROUPED: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, DOT_F32: tl.constexpr, HAS_BIAS: tl.constexpr,
):
    """One [BLOCK_M, BLOCK_N] tile of the output from codes xq [M, K] with scales xs
    ([M, 1], or [M, K / BLOCK_K] when X_GROUPED). Tiles run in groups of GROUP_M row
    tiles, so that neighbouring programs share weight tiles in L2."""
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    k = tl.arange(0, BLOCK_K)
    mc = tl.minimum(m, M - 1)
    nc = tl.minimum(n, N - 1)
    x_tile = xq_ptr + mc.to(tl.int64)[:, None] * stride_xm + k[None, :]
    w_tile = w_ptr + nc.to(tl.int64)[:, None] * stride_wn + k[None, :]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.int32 if INT8 and not BLOCKED else tl.float32)
    for start in range(0, K, BLOCK_K):
        k_ok = (start + k < K)[None, :]
        part = _dot(tl.load(x_tile + start, mask=k_ok, other=0.0),
                    tl.load(w_tile + start, mask=k_ok, other=0.0), INT8, DOT_F32)
        if BLOCKED:
            group = start // BLOCK_K
            xs = tl.load(xs_ptr + mc * stride_xsm + (group if X_GROUPED else 0))
            ws = tl.load(ws_ptr + (nc // block_rows) * stride_wsn + group)
            acc += part.to(tl.float32) * xs[:, None] * ws[None, :]
        else:
            acc += part.to(acc.dtype)
    y = acc.to(tl.float32)
    if not BLOCKED:
        y = y * tl.load(xs_ptr + mc * stride_xsm)[:, None] * tl.load(ws_ptr + nc)[None, :]
    if HAS_BIAS:
        y += tl.load(bias_ptr + nc).to(tl.float32)[None, :]
    keep = (m < M)[:, None] & (n < N)[None, :]
    tl.store(out_ptr + m.to(tl.int64)[:, None] * stride_om + n[None, :],
             y.to(out_ptr.dtype.element_ty), mask=keep)


def qgemv(out2: torch.Tensor, x2: torch.Tensor, xs: torch.Tensor | None, weight: torch.Tensor,
          wscale: torch.Tensor, bias: torch.Tensor | None, *, x_mode: int,
          block: tuple[int, int] | None = None, plan: QGemvPlan | None = None) -> torch.Tensor:
    """`_qgemv_kernel` into out2 [M, N]: x2 [M, K] in the model's type (x_mode 0: dynamic,
    1: static scale xs, a scalar) or codes with scales xs [M, 1] (x_mode 2)."""
    m, k = x2.shape
    n = weight.shape[0]
    int8 = weight.dtype == torch.int8
    if plan is None:
        plan = plan_qgemv(m, n, k, parallel_units(x2.device), block[1] if block else None)
    if block is not None:
        assert plan.block_k == block[1], "a blocked weight's K tile is its block"
    split_len = triton.cdiv(triton.cdiv(k, plan.num_splits), plan.block_k) * plan.block_k
    splits = triton.cdiv(k, split_len)
    part = (torch.empty((splits, m, n), dtype=torch.float32, device=x2.device)
            if splits > 1 else out2)
    b = bias if bias is not None else wscale  # a placeholder when unused
    xs_arg = xs if xs is not None else wscale
    _qgemv_kernel[(triton.cdiv(n, plan.block_n), splits)](
        out2, part, x2, xs_arg, weight, wscale, b, m, n, k, split_len,
        block[0] if block else 1, out2.stride(0), x2.stride(0),
        xs.stride(0) if x_mode == 2 else 0, weight.stride(0),
        wscale.stride(0) if block else 0, INT8=int8, X_MODE=x_mode, BLOCKED=block is not None,
        BLOCK_M=DOT_ROWS if plan.use_dot else pow2(m), BLOCK_N=plan.block_n,
        BLOCK_K=plan.block_k, EVEN_K=k % plan.block_k == 0, USE_DOT=plan.use_dot,
        DOT_F32=interpreted(_qgemv_kernel) and not int8, EXACT=interpreted(_qgemv_kernel),
        HAS_BIAS=bias is not None, NUM_SPLITS=splits, STAGES=plan.num_stages,
        num_warps=plan.num_warps, num_stages=plan.num_stages,
    )
    if splits > 1:
        sum_splits(out2, part, bias, splits, dependent=False)
    return out2


def qgemm(out2: torch.Tensor, xq: torch.Tensor, xs: torch.Tensor, weight: torch.Tensor,
          wscale: torch.Tensor, bias: torch.Tensor | None, *,
          block: tuple[int, int] | None = None, plan: QGemmPlan | None = None) -> torch.Tensor:
    """`_qgemm_kernel` into out2 [M, N] from codes xq [M, K] and their scales xs [M, G]."""
    m, k = xq.shape
    n = weight.shape[0]
    plan = plan or plan_qgemm(m, n, block[1] if block else None)
    if block is not None:
        assert plan.block_k == block[1], "a blocked weight's K tile is its block"
    grid = (triton.cdiv(m, plan.block_m) * triton.cdiv(n, plan.block_n),)
    _qgemm_kernel[grid](
        out2, xq, xs, weight, wscale, bias if bias is not None else wscale, m, n, k,
        block[0] if block else 1, out2.stride(0), xq.stride(0), xs.stride(0),
        weight.stride(0), wscale.stride(0) if block else 0, INT8=weight.dtype == torch.int8,
        BLOCKED=block is not None, X_GROUPED=xs.shape[1] > 1, BLOCK_M=plan.block_m,
        BLOCK_N=plan.block_n, BLOCK_K=plan.block_k, GROUP_M=8,
        DOT_F32=interpreted(_qgemm_kernel) and weight.dtype != torch.int8,
        HAS_BIAS=bias is not None, num_warps=plan.num_warps, num_stages=plan.num_stages,
    )
    return out2

