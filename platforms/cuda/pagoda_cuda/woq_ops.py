"""woq_linear on NVIDIA GPUs ("cuda_native" provider): 1 to MAX_ROWS rows of 16-bit x times
4-bit codes through the tensor-core kernel of `csrc/woq_mma.cu` (`pagoda_cuda.native`),
everything else through the shared Triton kernels (`pagoda.kernels.triton.quant_linear`),
on one prepared weight: Triton's layout (which the library reads as it is; the scales
float32, as every woq_linear kernel takes them) plus, in a 16-bit model, each group's zero
point where the offsets are -z * s with z an integer (GPTQ, AWQ, compressed-tensors,
symmetric formats, GGUF Q4_0): the kernel forms code - z exactly and scales it per weight
(groups under 128 inputs) or scales each 128-input chunk's float32 sums (groups of 128
and more).

The kernel takes such weights in groups of 32 to 256 inputs, K a multiple of 128, N of 16;
other weights (GGUF Q4_1's minimum offsets among them) go to Triton whatever their rows.
Measured against the Triton kernels in `ci/bench_quant_kernels.py --ops int4` ("cuda mma"
rows).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from pagoda.kernels.triton import quant_linear
from pagoda.kernels.triton.common import rows
from pagoda.kernels.triton.woq_gemm import PackedGroupWeight
from pagoda.quant.tensors import GroupQuantWeight
from pagoda_cuda import native
from pagoda_cuda.triton_ops import KERNELS

MAX_ROWS = 16
"""Most rows of x the kernel takes (two 8-column MMA tiles)."""
WARPS = 8
"""Warps a block (they split K)."""
GROUPS = (32, 64, 128, 256)
ROW_TILE, K_TILE = 16, 128
ZERO_TOLERANCE = 1e-3
"""How far -o / s may be from an integer and still be taken for a zero point (float32
rounding of o = -z * s leaves ~1e-7)."""


@dataclass(frozen=True)
class NativeGroupWeight(PackedGroupWeight):
    """Triton's layout and, for the kernel, each group's integer zero point in the model's
    16-bit type ([N, K / GROUP]; None where the offsets are not -z * s or the model is not
    16-bit)."""

    zeros: torch.Tensor | None = None


def prepare_woq(weight: GroupQuantWeight, dtype: torch.dtype | None = None) -> NativeGroupWeight:
    """Triton's layout (`quant_linear.prepare_woq`) and, for a weight of the kernel's
    format (4 bits, its group sizes, integer zero points) in a 16-bit model, the zero
    points in `dtype`."""
    zeros = None
    if dtype in native.DTYPE_CODES and weight.bits == 4 and weight.group_size in GROUPS:
        zeros = zero_points(weight, dtype)
    packed = quant_linear.prepare_woq(weight, dtype)
    return NativeGroupWeight(**{f.name: getattr(packed, f.name) for f in fields(packed)},
                             zeros=zeros)


def zero_points(weight: GroupQuantWeight, dtype: torch.dtype) -> torch.Tensor | None:
    """z = -offsets / scales in `dtype` where every z is an integer code, else None (a zero
    scale too: its NaN or infinite z is no code)."""
    zeros = -weight.offsets.float() / weight.scales.float()
    rounded = zeros.round()
    if not (bool(((zeros - rounded).abs() <= ZERO_TOLERANCE).all())
            and rounded.min() >= 0 and rounded.max() < 2**weight.bits):
        return None
    return rounded.to(dtype).contiguous()


def fits(x2: torch.Tensor, weight: NativeGroupWeight, bias: torch.Tensor | None) -> bool:
    """Whether the kernel takes x [M, K] (M >= 1) times `weight` (+ `bias`): x as it is
    (not a GGUF's rounded activations, `act_block`, which Triton's path rounds)."""
    m, k = x2.shape
    n = weight.shape[0]
    zeros = weight.zeros
    return (weight.bits == 4 and zeros is not None and not weight.act_block
            and x2.dtype in native.DTYPE_CODES
            and 1 <= m <= MAX_ROWS and n % ROW_TILE == 0 and k > 0 and k % K_TILE == 0
            and weight.group_size in GROUPS
            and weight.scales.dtype == torch.float32 and zeros.dtype == x2.dtype
            and (bias is None or (bias.dtype == x2.dtype and bias.is_contiguous()))
            and x2.stride(1) == 1 and _aligned(x2, x2.stride(0))
            and weight.words.stride(1) == 1 and _aligned(weight.words, weight.words.stride(0) * 2)
            and weight.scales.stride(1) == 1 and zeros.stride() == weight.scales.stride())


def _aligned(t: torch.Tensor, row_stride: int) -> bool:
    """16-byte aligned start and rows (row_stride in 16-bit elements)."""
    return t.data_ptr() % 16 == 0 and row_stride % 8 == 0


def woq4_mma(out2: torch.Tensor, x2: torch.Tensor, weight: NativeGroupWeight,
             bias: torch.Tensor | None, warps: int = WARPS) -> torch.Tensor:
    """out2 [M, N] = x2 [M, K] W^T (+ bias) on the kernel (`fits` must hold)."""
    m, k = x2.shape
    native.call("pagoda_woq4_mma", x2.device, native.DTYPE_CODES[x2.dtype], out2.data_ptr(),
                x2.data_ptr(), weight.words.data_ptr(), weight.scales.data_ptr(),
                weight.zeros.data_ptr(), native.pointer(bias), m, out2.shape[1], k,
                x2.stride(0), out2.stride(0), weight.words.stride(0), weight.scales.stride(0),
                weight.group_size.bit_length() - 1, warps)
    return out2


def woq_linear(x: torch.Tensor, weight: NativeGroupWeight,
               bias: torch.Tensor | None = None) -> torch.Tensor:
    """See `pagoda.ops.quant_reference.woq_linear`; `weight` from `prepare_woq`."""
    k, n = x.shape[-1], weight.shape[0]
    x2 = rows(x, k)
    if not fits(x2, weight, bias):
        return KERNELS.woq_linear(x, weight, bias)
    out = torch.empty((*x.shape[:-1], n), dtype=x.dtype, device=x.device)
    woq4_mma(out.view(-1, n), x2, weight, bias)
    return out
