"""fp8_linear on NVIDIA GPUs ("cuda_native" provider): one row of 16-bit x times e4m3 codes
with row scales through the tensor-core kernel of `csrc/fp8_row.cu` (`pagoda_cuda.native`),
everything else through the shared Triton kernels (`pagoda.kernels.triton.quant_linear`),
on Triton's prepared weight (row-major codes, float32 scales), which the kernel reads as it
is.

The kernel quantizes x as the reference does (per token, or by the checkpoint's static
scale) into shared memory, turns each pair of codes into a float16 pair in one conversion
and multiplies both exactly on mma.sync, summing in float32. It needs the e4m3 conversion
instructions of compute capability 8.9 (sm_89, sm_90), and takes one row, N a multiple of
16, K of 64 up to 16384, rows of codes 16-byte aligned; blocked weights go to Triton.

In a fused decode layer (`row_matmul`) the kernel also takes one row as the input of the
RMSNorm before it and computes the norm itself (every block the whole row, into shared
memory, then its quantization), so the qkv projection launches no norm kernel.

Launches (`Fp8Plan`): blocks of 16 warps over 1 or 2 tiles of 16 outputs, K split between
blocks. A sweep on an H100 (session 29, docs/benchmarks.md; µs a call in CUDA graphs,
against Triton's row kernel), best of 8 or 16 warps, 1, 2 or 4 tiles, 1, 2 or 4 chunks in
flight a warp: qkv 12.4 against 12.5, 13.4 against 15.4 on a normed row (Triton's with
the norm kernel before it); o 8.6 against 9.7; gate_up 45.0 against 45.3 and 50.7 against
49.6 normed; down (K = 14336) 29.8 at best (4 splits, 2 chunks in flight) against 25.2;
each best at 16 warps and, but for down, one chunk in flight (more cost registers: 4 made
qkv 18.0). So the provider serves the matmuls the kernel wins
(`prefers`: K unsplit, at most MAX_TILES_PER_SM tiles a multiprocessor) and hands Triton the
rest, gate_up and down of the 8B shape: C with FP8 weights 4.08 -> 3.92 ms a token on the
H100 (`ci/gpu_bench.py OUT XF`). PAGODA_CUDA_NATIVE_FP8=0 (ENABLE_ENV) turns it off.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from pagoda.kernels.triton.common import parallel_units
from pagoda.kernels.triton.decode_layer import RowMatmul
from pagoda.kernels.triton.quant_linear import ScaledWeight, prepare_fp8
from pagoda.kernels.triton.row_input import PLAIN, RowInput
from pagoda.models.decode_fusion import FusableLinear
from pagoda.quant.tensors import FP8_DTYPE, QuantizedActivation
from pagoda_cuda import native
from pagoda_cuda.triton_ops import KERNELS

__all__ = ["Fp8Plan", "fits", "fp8_linear", "fp8_row", "plan", "prefers", "prepare_fp8",
           "row_matmul", "serves", "unavailable"]

NEEDS = (8, 9)
"""cvt.rn.f16x2.e4m3x2 (older GPUs would convert each code in software)."""
ROW_TILE, K_TILE, MAX_INPUTS = 16, 64, 16384
SPLIT_INPUTS = 4096
"""The longest K the kernel serves (`prefers`); a plan for a longer one splits it between
ceil(K / SPLIT_INPUTS) blocks a tile (the 8B shape's down, K = 14336: 29.8 µs in 4 splits on
an H100, 30.2 whole, against Triton's 25.2)."""
MAX_TILES_PER_SM = 4
"""The most tiles of 16 outputs a multiprocessor for which the kernel serves a matmul (above,
Triton's row kernel streams the weight faster; `prefers`)."""
ENABLE_ENV = "PAGODA_CUDA_NATIVE_FP8"
"""0: serve every fp8_linear on Triton's kernels."""


def unavailable() -> str | None:
    """Why the provider does not serve here, or None (`KernelProvider.is_available`)."""
    if os.environ.get(ENABLE_ENV) == "0":
        return f"turned off ({ENABLE_ENV}=0)"
    return native.unavailable(NEEDS)


def fits(x2: torch.Tensor, weight: ScaledWeight, bias: torch.Tensor | None) -> bool:
    """Whether the kernel takes x [1, K] times `weight` (+ `bias`)."""
    return (weight_fits(weight) and bias_fits(bias, x2.dtype)
            and x2.shape == (1, weight.weight.shape[1]) and x2.dtype in native.DTYPE_CODES
            and x2.stride(1) == 1 and x2.data_ptr() % 16 == 0)


def weight_fits(weight: ScaledWeight) -> bool:
    """`fits`' conditions on the weight: e4m3 codes with row scales (no blocks), N a multiple
    of 16, K of 64 up to MAX_INPUTS, rows 16-byte aligned, a float32 static scale or none."""
    codes = weight.weight
    n, k = codes.shape
    static = weight.input_scale
    return (weight.block is None and codes.dtype == FP8_DTYPE and n % ROW_TILE == 0
            and k % K_TILE == 0 and k <= MAX_INPUTS and codes.stride(1) == 1
            and codes.stride(0) % 16 == 0 and codes.data_ptr() % 16 == 0
            and weight.scale.dtype == torch.float32 and weight.scale.shape == (n,)
            and weight.scale.is_contiguous()
            and (static is None or (static.dtype == torch.float32 and static.numel() == 1)))


def bias_fits(bias: torch.Tensor | None, dtype: torch.dtype) -> bool:
    """Whether the kernel adds `bias` to outputs of `dtype`."""
    return bias is None or (bias.dtype == dtype and bias.is_contiguous())


def row_fits(row: RowInput) -> bool:
    """Whether the kernel computes `row`'s normed input itself (K at most MAX_INPUTS)."""
    return native.normed_row_fits(row, MAX_INPUTS)


@dataclass(frozen=True)
class Fp8Plan:
    """How the kernel launches for one matmul: blocks over `tiles` tiles of 16 outputs (1 or
    2), K split between `splits` blocks a tile."""

    tiles: int = 1
    splits: int = 1


def prefers(n: int, k: int, units: int) -> bool:
    """Whether the kernel, not Triton's row kernel, serves an N x K weight on a GPU of
    `units` multiprocessors: K unsplit (at most SPLIT_INPUTS) and at most MAX_TILES_PER_SM
    tiles of 16 outputs a multiprocessor."""
    return k <= SPLIT_INPUTS and n // ROW_TILE <= MAX_TILES_PER_SM * units


def plan(n: int, k: int, units: int) -> Fp8Plan:
    """The launch for an N x K weight on `units` multiprocessors: two tiles a block where
    there are more than two a multiprocessor, K split past SPLIT_INPUTS."""
    tiles = 2 if n // ROW_TILE > 2 * units and n % (2 * ROW_TILE) == 0 else 1
    return Fp8Plan(tiles=tiles, splits=-(-k // SPLIT_INPUTS))


def serves(x2: torch.Tensor, weight: ScaledWeight, bias: torch.Tensor | None) -> bool:
    """Whether the provider runs x [M, K] times `weight` on the kernel (`fits` and
    `prefers`), else on Triton."""
    n, k = weight.weight.shape
    return fits(x2, weight, bias) and prefers(n, k, parallel_units(x2.device))


def fp8_row(out2: torch.Tensor, x2: torch.Tensor | RowInput, weight: ScaledWeight,
            bias: torch.Tensor | None, launch: Fp8Plan | None = None) -> torch.Tensor:
    """out2 [1, N] = fp8_linear(x2 [1, K]) (+ bias) on the kernel (`fits` must hold), or of
    the input of the RMSNorm a NORMED `RowInput` describes (`row_fits`; x + residual stored
    into its `summed`), launched as `launch` says (default: `plan`)."""
    n, k = weight.weight.shape
    row = x2 if isinstance(x2, RowInput) else RowInput(x2)
    launch = launch or plan(n, k, parallel_units(row.x.device))
    split_sums = (torch.empty((launch.splits, n), dtype=torch.float32, device=row.x.device)
                  if launch.splits > 1 else None)
    input_kind = (0 if row.kind == PLAIN else 2 if row.residual is not None else 1)
    native.call("pagoda_fp8_row", row.x.device, native.DTYPE_CODES[row.x.dtype], input_kind,
                out2.data_ptr(), row.x.data_ptr(), native.pointer(row.residual),
                native.pointer(row.norm_weight), native.pointer(row.summed), row.eps,
                weight.weight.data_ptr(), weight.scale.data_ptr(),
                native.pointer(weight.input_scale), native.pointer(bias), n, k,
                weight.weight.stride(0), launch.splits, native.pointer(split_sums),
                launch.tiles)
    return out2


def fp8_linear(x: torch.Tensor | QuantizedActivation, weight: ScaledWeight,
               bias: torch.Tensor | None = None) -> torch.Tensor:
    """See `pagoda.ops.quant_reference.fp8_linear`; `weight` from `prepare_fp8`. x given
    quantized (as Triton's `quantized_input` asks, never one row) goes to Triton."""
    if isinstance(x, QuantizedActivation):
        return KERNELS.fp8_linear(x, weight, bias)
    return native.linear(x, weight, bias, serves, fp8_row, KERNELS.fp8_linear)


def row_matmul(linear: FusableLinear) -> RowMatmul | None:
    """The kernel as a fused decode layer's one-row matmul (`fuse_decode_layer`'s
    `row_matmuls`), for a linear of this provider whose weight it takes: it computes a
    normed row itself (`row_fits`); other rows' inputs run their ops' kernels first. It has
    no rotary epilogue."""
    weight, bias = linear.weight, linear.bias
    if (linear.op is not fp8_linear or not isinstance(weight, ScaledWeight)
            or not weight_fits(weight)):
        return None
    n, k = weight.weight.shape
    preferred = prefers(n, k, parallel_units(weight.weight.device))  # else: norm kernel, Triton
    return native.row_matmul(n, lambda row: (preferred and row_fits(row)
                                             and bias_fits(bias, row.x.dtype)),
                             lambda out, row: fp8_row(out, row, weight, bias),
                             lambda x: fp8_linear(x, weight, bias))
