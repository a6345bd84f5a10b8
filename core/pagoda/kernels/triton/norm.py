"""RMSNorm, and residual-add + RMSNorm fused: one program per row, float32 statistics; and
add + RMSNorm with its output quantized per token for a W8A8 linear
(`fused_add_rms_norm_quant`), never written in the model's type."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.kernels.triton.common import interpreted, pow2, rows, wait_for_prior_kernels
from pagoda.kernels.triton.launch import DEFAULT_LAUNCH, TritonLaunch
from pagoda.kernels.triton.quant_prims import _row_scale, _store_codes
from pagoda.quant.tensors import MIN_SCALE, QuantizedActivation, check_activation_code

MAX_BLOCK = 1024
"""Row elements handled per loop iteration; wider rows take several. The one-row matmuls
that compute a norm themselves (`row_input`) sum the squares the same way: at 8192 their
add + RMSNorm pass held 128 registers a thread in the bf16 gemv (sm_90 ptxas), at 1024
80 (72 without it)."""


@triton.jit
def row_sum(x_ptr, r_ptr, row_x, row_r, offs, ok, HAS_RESIDUAL: tl.constexpr):
    """x + residual of one chunk in float32, rounded to x's type as the reference does."""
    x = tl.load(x_ptr + row_x + offs, mask=ok, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        r = tl.load(r_ptr + row_r + offs, mask=ok, other=0.0).to(tl.float32)
        x = (x + r).to(x_ptr.dtype.element_ty).to(tl.float32)
    return x


@triton.jit
def _row_inv_rms(sum_ptr, x_ptr, r_ptr, row, width, eps, stride_sum, stride_x, stride_r,
                 HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr):
    """1 / rms of row `row` of x (+ residual), its squares summed in float32 chunk by chunk
    of BLOCK; with a residual, also stores the sum x + residual. Every kernel that norms a
    row calls this, so that (at the same BLOCK and warps) their statistics agree bit for
    bit."""
    cols = tl.arange(0, BLOCK)
    squares = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, width, BLOCK):
        offs = start + cols
        ok = offs < width
        x = row_sum(x_ptr, r_ptr, row * stride_x, row * stride_r, offs, ok, HAS_RESIDUAL)
        squares += x * x
        if HAS_RESIDUAL:
            tl.store(sum_ptr + row * stride_sum + offs, x.to(sum_ptr.dtype.element_ty), mask=ok)
    return 1.0 / tl.sqrt(tl.sum(squares, axis=0) / width + eps)


@triton.jit
def _normed(x_ptr, r_ptr, w_ptr, row, offs, ok, inv_rms, stride_x, stride_r,
            HAS_RESIDUAL: tl.constexpr):
    """norm(x (+ residual)) * weight of one chunk, in float32. The sum is recomputed rather
    than read back: there is no ordering between a program's stores and its loads."""
    x = row_sum(x_ptr, r_ptr, row * stride_x, row * stride_r, offs, ok, HAS_RESIDUAL)
    w = tl.load(w_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    return x * inv_rms * w


@triton.jit
def _rms_norm_kernel(
    out_ptr, sum_ptr, x_ptr, r_ptr, w_ptr, width, eps,
    stride_out, stride_sum, stride_x, stride_r,
    HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr,
):
    """out = norm(x (+ residual)) * weight for one row; with a residual, sum = x + residual."""
    wait_for_prior_kernels(PDL)
    row = tl.program_id(0).to(tl.int64)
    inv_rms = _row_inv_rms(sum_ptr, x_ptr, r_ptr, row, width, eps, stride_sum, stride_x,
                           stride_r, HAS_RESIDUAL, BLOCK)
    cols = tl.arange(0, BLOCK)
    for start in range(0, width, BLOCK):
        offs = start + cols
        ok = offs < width
        v = _normed(x_ptr, r_ptr, w_ptr, row, offs, ok, inv_rms, stride_x, stride_r,
                    HAS_RESIDUAL)
        tl.store(out_ptr + row * stride_out + offs, v.to(out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _rms_norm_quant_kernel(
    q_ptr, s_ptr, sum_ptr, x_ptr, r_ptr, w_ptr, width, eps,
    stride_q, stride_sum, stride_x, stride_r,
    INT8: tl.constexpr, BLOCK: tl.constexpr, EXACT: tl.constexpr, PDL: tl.constexpr,
):
    """sum = x + residual and the codes and float32 scale of norm(sum) * weight (rounded to
    x's type, as `_rms_norm_kernel` stores it) quantized per token, for one row: the
    statistics as `_rms_norm_kernel` takes them (`_row_inv_rms`), then the normed row
    recomputed (x and residual re-read, from L2) once for its amax and once for its codes,
    each rounded as `quant_prims._act_quant_kernel` rounds it."""
    QMAX: tl.constexpr = 127.0 if INT8 else 448.0
    wait_for_prior_kernels(PDL)
    row = tl.program_id(0).to(tl.int64)
    inv_rms = _row_inv_rms(sum_ptr, x_ptr, r_ptr, row, width, eps, stride_sum, stride_x,
                           stride_r, True, BLOCK)
    cols = tl.arange(0, BLOCK)
    amax = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, width, BLOCK):
        offs = start + cols
        ok = offs < width
        v = _normed(x_ptr, r_ptr, w_ptr, row, offs, ok, inv_rms, stride_x, stride_r, True)
        v = v.to(x_ptr.dtype.element_ty).to(tl.float32)
        amax = tl.maximum(amax, tl.where(ok, tl.abs(v), 0.0))
    scale = _row_scale(amax, QMAX)
    tl.store(s_ptr + row, scale)
    for start in range(0, width, BLOCK):
        offs = start + cols
        ok = offs < width
        v = _normed(x_ptr, r_ptr, w_ptr, row, offs, ok, inv_rms, stride_x, stride_r, True)
        v = v.to(x_ptr.dtype.element_ty).to(tl.float32)
        # Stored as [1, BLOCK]: Triton gives all of a kernel's accesses of one shape the
        # elements a thread of the widest takes, and 1-byte codes of the row's shape would
        # widen those of its sum of squares (fp32 rows at 4 warps: 8 a thread, not 4), and so
        # change its order (tests/kernels/compile_quant_sm90.py checks it does not).
        _store_codes(q_ptr + row * stride_q + offs[None, :], v[None, :], scale, ok[None, :],
                     INT8, EXACT)


def _launch(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float,
            launch: TritonLaunch) -> tuple[torch.Tensor, torch.Tensor | None]:
    width = x.shape[-1]
    x2 = rows(x, width)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    out2 = out.view(-1, width)
    r2 = rows(residual, width) if residual is not None else x2
    summed = torch.empty_like(out) if residual is not None else out
    sum2 = summed.view(-1, width)
    if x2.shape[0]:
        _rms_norm_kernel[(x2.shape[0],)](
            out2, sum2, x2, r2, weight.contiguous(), width, eps,
            out2.stride(0), sum2.stride(0), x2.stride(0), r2.stride(0),
            HAS_RESIDUAL=residual is not None, BLOCK=min(pow2(width), MAX_BLOCK),
            **launch.elementwise.kwargs(), **launch.dependency("elementwise"),
        )
    return out, summed if residual is not None else None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, *,
             launch: TritonLaunch = DEFAULT_LAUNCH) -> torch.Tensor:
    """See `pagoda.ops.reference.rms_norm`."""
    return _launch(x, None, weight, eps, launch)[0]


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, *,
    launch: TritonLaunch = DEFAULT_LAUNCH,
) -> tuple[torch.Tensor, torch.Tensor]:
    """See `pagoda.ops.reference.fused_add_rms_norm`: (rms_norm(x + residual), x + residual)."""
    out, summed = _launch(x, residual, weight, eps, launch)
    assert summed is not None
    return out, summed


def fused_add_rms_norm_quant(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
    code_dtype: torch.dtype, *, launch: TritonLaunch = DEFAULT_LAUNCH,
) -> tuple[QuantizedActivation, torch.Tensor]:
    """See `pagoda.ops.reference.fused_add_rms_norm_quant`: one launch writing x + residual
    (as `fused_add_rms_norm`) and the normed rows' codes [M, K] and float32 scales [M, 1]
    (M: all leading dims), the same bit for bit as `fused_add_rms_norm` followed by
    `quant_prims.quantize_activations` of its output, which it never writes."""
    check_activation_code(code_dtype)
    width = x.shape[-1]
    x2 = rows(x, width)
    r2 = rows(residual, width)
    m = x2.shape[0]
    summed = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    sum2 = summed.view(-1, width)
    codes = torch.empty((m, width), dtype=code_dtype, device=x.device)
    scale = torch.empty((m, 1), dtype=torch.float32, device=x.device)
    if m == 0 or width == 0:
        return QuantizedActivation(codes, scale.fill_(MIN_SCALE), x.dtype), summed
    _rms_norm_quant_kernel[(m,)](
        codes, scale, sum2, x2, r2, weight.contiguous(), width, eps,
        codes.stride(0), sum2.stride(0), x2.stride(0), r2.stride(0),
        INT8=code_dtype == torch.int8, BLOCK=min(pow2(width), MAX_BLOCK),
        EXACT=interpreted(_rms_norm_quant_kernel),
        **launch.elementwise.kwargs(), **launch.dependency("elementwise"),
    )
    return QuantizedActivation(codes, scale, x.dtype), summed
