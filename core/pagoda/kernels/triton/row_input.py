"""The input of a one-row matmul, computed by the matmul kernel itself from the inputs of the
op before it.

In a decode step of one sequence a decoder layer's small ops (the residual add and RMSNorm
before the qkv and gate_up projections, SiLU-and-mul before the down projection) each read
and write one row of a few thousand values: a few µs a kernel on a GPU, nearly all of it
the launch and the ramp-up, three of the eight kernels a layer runs around its attention.
The one-row matmuls (`gemv.py`, `row_gemv.py`, `woq_gemm.py`) can take such an op's inputs
instead of its output (`RowInput`): each program computes the row's RMS first (a pass over
the row, which one program also stores as the residual sum), then, at every step of its K
loop, its chunk of the normed or gated row, in the same float32 arithmetic and with the
same rounding to the activation type as the op's own kernel (`norm.py`, `activation.py`).
The products are therefore those of the op followed by the matmul.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

from pagoda.kernels.triton.common import pow2, rows
from pagoda.kernels.triton.norm import MAX_BLOCK, row_sum

PLAIN = tl.constexpr(0)
NORMED = tl.constexpr(1)
GATED = tl.constexpr(2)


@dataclass(frozen=True)
class RowInput:
    """One row a matmul multiplies: `x` itself [1, K] (PLAIN), rms_norm(x (+ residual)) *
    norm_weight (NORMED; x + residual is stored into `summed` as `fused_add_rms_norm`
    returns it), or silu(x[:, :K]) * x[:, K:] for x [1, 2K] (GATED)."""

    x: torch.Tensor
    kind: int = 0
    residual: torch.Tensor | None = None
    norm_weight: torch.Tensor | None = None
    eps: float = 0.0
    summed: torch.Tensor | None = None

    @staticmethod
    def plain(x: torch.Tensor) -> RowInput:
        return RowInput(rows(x, x.shape[-1]))

    @staticmethod
    def normed(x: torch.Tensor, weight: torch.Tensor, eps: float,
               residual: torch.Tensor | None = None) -> RowInput:
        """rms_norm(x, weight, eps), or with a residual fused_add_rms_norm's first output
        (its second, x + residual, lands in `summed`)."""
        x2 = rows(x, x.shape[-1])
        r2 = rows(residual, x2.shape[1]) if residual is not None else None
        summed = torch.empty_like(x2) if residual is not None else None
        return RowInput(x2, int(NORMED), r2, weight.contiguous(), eps, summed)

    @staticmethod
    def gated(x: torch.Tensor) -> RowInput:
        """silu_and_mul(x)."""
        return RowInput(rows(x, x.shape[-1]), int(GATED))

    @property
    def width(self) -> int:
        """K: the inputs of the matmul."""
        return self.x.shape[1] // 2 if self.kind == GATED else self.x.shape[1]

    def kernel_args(self) -> tuple[Any, ...]:
        """The kernels' (x_ptr, r_ptr, nw_ptr, sum_ptr, eps) arguments."""
        x = self.x
        assert self.kind == PLAIN or x.shape[0] == 1, f"a row input of {x.shape[0]} rows"
        return (x, self.residual if self.residual is not None else x,
                self.norm_weight if self.norm_weight is not None else x,
                self.summed if self.summed is not None else x, self.eps)

    def kernel_constants(self) -> dict[str, Any]:
        """The kernels' INPUT, HAS_RESIDUAL and NORM_BLOCK."""
        return {"INPUT": self.kind, "HAS_RESIDUAL": self.residual is not None,
                "NORM_BLOCK": min(pow2(self.width), MAX_BLOCK)}


@triton.jit
def row_inv_rms(x_ptr, r_ptr, sum_ptr, K, eps, sum_len, HAS_RESIDUAL: tl.constexpr,
                BLOCK: tl.constexpr):
    """1 / rms of x (+ residual) over its K values, as `norm._rms_norm_kernel` computes it;
    the first `sum_len` values of x + residual are stored at sum_ptr (K in one program of
    the grid, 0 in the others)."""
    cols = tl.arange(0, BLOCK)
    squares = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, K, BLOCK):
        offs = start + cols
        ok = offs < K
        x = row_sum(x_ptr, r_ptr, 0, 0, offs, ok, HAS_RESIDUAL)
        squares += x * x
        if HAS_RESIDUAL:
            tl.store(sum_ptr + offs, x.to(sum_ptr.dtype.element_ty), mask=offs < sum_len)
    return 1.0 / tl.sqrt(tl.sum(squares, axis=0) / K + eps)


@triton.jit
def row_values(x_ptr, r_ptr, nw_ptr, offs, ok, inv_rms, K, INPUT: tl.constexpr,
               HAS_RESIDUAL: tl.constexpr):
    """The matmul's input at `offs` (any shape; 0 where not `ok`) in float32, rounded to
    x's type as the op before the matmul stores it."""
    if INPUT == NORMED:
        x = row_sum(x_ptr, r_ptr, 0, 0, offs, ok, HAS_RESIDUAL)
        w = tl.load(nw_ptr + offs, mask=ok, other=0.0).to(tl.float32)
        v = x * inv_rms * w
    elif INPUT == GATED:
        gate = tl.load(x_ptr + offs, mask=ok, other=0.0).to(tl.float32)
        up = tl.load(x_ptr + K + offs, mask=ok, other=0.0).to(tl.float32)
        v = gate / (1.0 + tl.exp(-gate)) * up
    else:
        v = tl.load(x_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    return v.to(x_ptr.dtype.element_ty).to(tl.float32)


@triton.jit
def row_scale(x_ptr, r_ptr, nw_ptr, sum_ptr, K, eps, INPUT: tl.constexpr,
              HAS_RESIDUAL: tl.constexpr, NORM_BLOCK: tl.constexpr):
    """The row's 1 / rms for NORMED (1.0 otherwise): the first step of a kernel taking a
    RowInput, by every program of its grid (the first stores the residual sum)."""
    if INPUT == NORMED:
        first = (tl.program_id(0) == 0) & (tl.program_id(1) == 0)
        inv_rms = row_inv_rms(x_ptr, r_ptr, sum_ptr, K, eps, tl.where(first, K, 0),
                              HAS_RESIDUAL, NORM_BLOCK)
    else:
        inv_rms = 1.0
    return inv_rms
