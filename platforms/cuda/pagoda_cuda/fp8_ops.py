"""fp8_linear on NVIDIA GPUs with float8 tensor cores ("cuda_native" provider): one row of
16-bit x times an e4m3 weight with per-row scales through `csrc/fp8_mma.cu`
(`pagoda_cuda.native`), everything else through the shared Triton kernels
(`pagoda.kernels.triton.quant_linear`), on one prepared weight (`prepare_fp8`'s).

The kernel quantizes x per token (or by the static input scale) as the reference does and
takes K a multiple of 64, N of 16. Measured against the Triton kernels in
`ci/bench_quant_kernels.py --ops fp8` ("cuda mma" rows).
"""

from __future__ import annotations

import torch

from pagoda.kernels.triton.common import rows
from pagoda.kernels.triton.quant_linear import ScaledWeight
from pagoda_cuda import native
from pagoda_cuda.triton_ops import KERNELS

WARPS = 8
"""Warps a block (they split K)."""
ROW_TILE, K_TILE = 16, 64


def fits(x2: torch.Tensor, weight: ScaledWeight, bias: torch.Tensor | None) -> bool:
    """Whether the kernel takes x [M, K] times the e4m3 `weight` (+ `bias`)."""
    m, k = x2.shape
    w = weight.weight
    n = w.shape[0]
    return (m == 1 and x2.dtype in native.DTYPE_CODES and w.dtype == torch.float8_e4m3fn
            and weight.block is None and weight.scale.numel() == n
            and weight.scale.dtype == torch.float32 and weight.scale.is_contiguous()
            and n % ROW_TILE == 0 and k > 0 and k % K_TILE == 0
            and (bias is None or (bias.dtype == x2.dtype and bias.is_contiguous()))
            and x2.stride(1) == 1 and x2.data_ptr() % 16 == 0
            and w.stride(1) == 1 and w.stride(0) % 16 == 0 and w.data_ptr() % 16 == 0)


def fp8_mma(out2: torch.Tensor, x2: torch.Tensor, weight: ScaledWeight,
            bias: torch.Tensor | None, warps: int = WARPS) -> torch.Tensor:
    """out2 [1, N] = fp8_linear of x2 [1, K] (`fits` must hold)."""
    w = weight.weight
    native.call("pagoda_fp8_mma", x2.device, native.DTYPE_CODES[x2.dtype], out2.data_ptr(),
                x2.data_ptr(), w.data_ptr(), weight.scale.data_ptr(),
                native.pointer(weight.input_scale), native.pointer(bias), w.shape[0],
                x2.shape[1], w.stride(0), warps)
    return out2


def fp8_linear(x: torch.Tensor, weight: ScaledWeight,
               bias: torch.Tensor | None = None) -> torch.Tensor:
    """See `pagoda.ops.quant_reference.fp8_linear`; `weight` from `prepare_fp8`."""
    k, n = x.shape[-1], weight.shape[0]
    x2 = rows(x, k)
    if not fits(x2, weight, bias):
        return KERNELS.fp8_linear(x, weight, bias)
    out = torch.empty((*x.shape[:-1], n), dtype=x.dtype, device=x.device)
    fp8_mma(out.view(-1, n), x2, weight, bias)
    return out
