"""RMSNorm, and residual-add + RMSNorm fused: one program per row, float32 statistics."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.kernels.triton.common import pow2, rows, wait_for_prior_kernels
from pagoda.kernels.triton.launch import DEFAULT_LAUNCH, TritonLaunch

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
def _rms_norm_kernel(
    out_ptr, sum_ptr, x_ptr, r_ptr, w_ptr, width, eps,
    stride_out, stride_sum, stride_x, stride_r,
    HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr,
):
    """out = norm(x (+ residual)) * weight for one row; with a residual, sum = x + residual."""
    wait_for_prior_kernels(PDL)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    squares = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, width, BLOCK):
        offs = start + cols
        ok = offs < width
        x = row_sum(x_ptr, r_ptr, row * stride_x, row * stride_r, offs, ok, HAS_RESIDUAL)
        squares += x * x
        if HAS_RESIDUAL:
            tl.store(sum_ptr + row * stride_sum + offs, x.to(sum_ptr.dtype.element_ty), mask=ok)
    inv_rms = 1.0 / tl.sqrt(tl.sum(squares, axis=0) / width + eps)
    for start in range(0, width, BLOCK):
        offs = start + cols
        ok = offs < width
        # Recomputed rather than read back: no ordering between this program's stores/loads.
        x = row_sum(x_ptr, r_ptr, row * stride_x, row * stride_r, offs, ok, HAS_RESIDUAL)
        w = tl.load(w_ptr + offs, mask=ok, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * stride_out + offs, (x * inv_rms * w).to(out_ptr.dtype.element_ty),
                 mask=ok)


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
