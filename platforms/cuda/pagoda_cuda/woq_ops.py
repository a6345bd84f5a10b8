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

In a fused decode layer (`pagoda.kernels.triton.decode_layer`, `row_matmul` here) the kernel
also takes one row as the input of the RMSNorm before it (residual added or not) and
computes the norm itself (`pagoda_woq4_mma_row`), so the qkv and gate_up projections of a
one-sequence decode step launch no norm kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from pagoda.kernels.triton import quant_linear
from pagoda.kernels.triton.common import parallel_units
from pagoda.kernels.triton.decode_layer import RowMatmul
from pagoda.kernels.triton.row_input import RowInput
from pagoda.kernels.triton.woq_gemm import PackedGroupWeight
from pagoda.models.decode_fusion import FusableLinear
from pagoda.quant.tensors import GroupQuantWeight
from pagoda_cuda import native
from pagoda_cuda.triton_ops import KERNELS

MAX_ROWS = 16
"""Most rows of x the kernel takes (two 8-column MMA tiles)."""
WARPS = 8
"""Warps a block (they split K), unless `block_warps` picks WIDE_WARPS."""
WIDE_WARPS = 16
"""Warps a block where a matmul's blocks are few (`block_warps`); the kernel takes them up to
WIDE_MAX_ROWS rows of x (one column tile)."""
WIDE_MAX_ROWS = 8
WIDE_MAX_BLOCKS_PER_SM = 2
GROUPS = (32, 64, 128, 256)
ROW_TILE, K_TILE = 16, 128
MAX_ROW_INPUTS = 16384
"""Most inputs (K) of a normed row the kernel computes itself (it keeps the row in shared
memory; csrc kMaxRowInputs)."""
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
    return (weight_fits(weight, bias, x2.dtype) and k == weight.shape[1] and 1 <= m <= MAX_ROWS
            and x2.stride(1) == 1 and _aligned(x2, x2.stride(0)))


def weight_fits(weight: PackedGroupWeight, bias: torch.Tensor | None,
                dtype: torch.dtype) -> bool:
    """`fits`' conditions on the weight and bias, for x of `dtype`."""
    n, k = weight.shape
    zeros = getattr(weight, "zeros", None)
    return (weight.bits == 4 and zeros is not None and not weight.act_block
            and dtype in native.DTYPE_CODES
            and n % ROW_TILE == 0 and k > 0 and k % K_TILE == 0
            and weight.group_size in GROUPS
            and weight.scales.dtype == torch.float32 and zeros.dtype == dtype
            and (bias is None or (bias.dtype == dtype and bias.is_contiguous()))
            and weight.words.stride(1) == 1 and _aligned(weight.words, weight.words.stride(0) * 2)
            and weight.scales.stride(1) == 1 and zeros.stride() == weight.scales.stride())


def row_fits(row: RowInput) -> bool:
    """Whether the kernel computes `row`'s normed input itself (`woq4_mma_row`; K at most
    MAX_ROW_INPUTS)."""
    return native.normed_row_fits(row, MAX_ROW_INPUTS)


def _aligned(t: torch.Tensor, row_stride: int) -> bool:
    """16-byte aligned start and rows (row_stride in 16-bit elements)."""
    return t.data_ptr() % 16 == 0 and row_stride % 8 == 0


def block_warps(m: int, n: int, multiprocessors: int) -> int:
    """Warps a block for m rows of x times N weight rows: WIDE_WARPS where the N / 16 blocks
    are at most WIDE_MAX_BLOCKS_PER_SM a multiprocessor (and m fits one column tile), else
    WARPS. Few blocks leave each multiprocessor few warps to hide the weights' latency; 16
    warps a block halve each warp's share of K. Measured on an H100 (132 multiprocessors,
    `docs/benchmarks.md`, session 28), one row, µs, 8 against 16 warps: down 4096 x 14336
    (256 blocks) 17.5 / 14.5, o 4096 x 4096 (256) 6.3 / 5.6, qkv 6144 x 4096 (384) 7.3 / 9.3,
    gate_up (1792) 27.2 / 29.2; 16 rows of down 23.8 / 27.4."""
    few_blocks = n // ROW_TILE <= WIDE_MAX_BLOCKS_PER_SM * multiprocessors
    return WIDE_WARPS if few_blocks and m <= WIDE_MAX_ROWS else WARPS


def _warps(m: int, n: int, device: torch.device) -> int:
    return block_warps(m, n, parallel_units(device))


def woq4_mma(out2: torch.Tensor, x2: torch.Tensor, weight: NativeGroupWeight,
             bias: torch.Tensor | None, warps: int | None = None) -> torch.Tensor:
    """out2 [M, N] = x2 [M, K] W^T (+ bias) on the kernel (`fits` must hold), with `warps`
    a block (default: `block_warps`)."""
    m, k = x2.shape
    warps = warps or _warps(m, out2.shape[1], x2.device)
    native.call("pagoda_woq4_mma", x2.device, native.DTYPE_CODES[x2.dtype], out2.data_ptr(),
                x2.data_ptr(), weight.words.data_ptr(), weight.scales.data_ptr(),
                weight.zeros.data_ptr(), native.pointer(bias), m, out2.shape[1], k,
                x2.stride(0), out2.stride(0), weight.words.stride(0), weight.scales.stride(0),
                weight.group_size.bit_length() - 1, warps)
    return out2


def woq4_mma_row(out: torch.Tensor, row: RowInput, weight: NativeGroupWeight,
                 bias: torch.Tensor | None, warps: int | None = None) -> torch.Tensor:
    """out [1, N] = rms_norm(row) W^T (+ bias) on the kernel, x + residual stored into
    `row.summed` where there is a residual (`row_fits` and `weight_fits` must hold), with
    `warps` a block (default: `block_warps`)."""
    k = row.width
    warps = warps or _warps(1, out.shape[1], row.x.device)
    native.call("pagoda_woq4_mma_row", row.x.device, native.DTYPE_CODES[row.x.dtype],
                2 if row.residual is not None else 1, out.data_ptr(), row.x.data_ptr(),
                native.pointer(row.residual), row.norm_weight.data_ptr(),
                native.pointer(row.summed), row.eps, weight.words.data_ptr(),
                weight.scales.data_ptr(), weight.zeros.data_ptr(), native.pointer(bias),
                out.shape[1], k, weight.words.stride(0), weight.scales.stride(0),
                weight.group_size.bit_length() - 1, warps)
    return out


def row_matmul(linear: FusableLinear) -> RowMatmul | None:
    """The kernel as a fused decode layer's one-row matmul (`fuse_decode_layer`'s
    `row_matmuls`), for a linear of this provider whose weight the kernel takes: it
    computes a normed row itself (`row_fits`); other rows' inputs run their ops' kernels
    first. It has no rotary epilogue."""
    weight, bias = linear.weight, linear.bias
    if (linear.op is not woq_linear or not isinstance(weight, NativeGroupWeight)
            or weight.zeros is None or not weight_fits(weight, bias, weight.zeros.dtype)):
        return None
    return native.row_matmul(weight.shape[0], row_fits,
                             lambda out, row: woq4_mma_row(out, row, weight, bias),
                             lambda x: woq_linear(x, weight, bias))


def woq_linear(x: torch.Tensor, weight: NativeGroupWeight,
               bias: torch.Tensor | None = None) -> torch.Tensor:
    """See `pagoda.ops.quant_reference.woq_linear`; `weight` from `prepare_woq`."""
    return native.linear(x, weight, bias, fits, woq4_mma, KERNELS.woq_linear)
