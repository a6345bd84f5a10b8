"""SiLU-and-mul: silu(x[..., :d]) * x[..., d:], in float32."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.kernels.triton.common import pow2, rows
from pagoda.kernels.triton.launch import DEFAULT_LAUNCH, TritonLaunch

BLOCK = 1024


@triton.jit
def _silu_and_mul_kernel(out_ptr, x_ptr, d, stride_out, stride_x, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < d
    gate = tl.load(x_ptr + row * stride_x + offs, mask=ok, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * stride_x + d + offs, mask=ok, other=0.0).to(tl.float32)
    out = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + row * stride_out + offs, out.to(out_ptr.dtype.element_ty), mask=ok)


def silu_and_mul(x: torch.Tensor, *, launch: TritonLaunch = DEFAULT_LAUNCH) -> torch.Tensor:
    """See `pagoda.ops.reference.silu_and_mul`."""
    d = x.shape[-1] // 2
    x2 = rows(x, 2 * d)
    out = torch.empty((*x.shape[:-1], d), dtype=x.dtype, device=x.device)
    out2 = out.view(-1, d)
    block = min(pow2(d), BLOCK)
    if x2.shape[0] and d:
        _silu_and_mul_kernel[(x2.shape[0], triton.cdiv(d, block))](
            out2, x2, d, out2.stride(0), x2.stride(0), BLOCK=block, **launch.elementwise.kwargs())
    return out
