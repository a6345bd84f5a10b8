"""CPU providers on pagoda-cpu's native kernels (`pagoda_cpu.csrc`).

`woq_linear` ("cpu_csrc"): 4- and 8-bit weights with a scale and offset per group of 32
times a power of two inputs (GGUF Q4_0 / Q4_1 / Q8_0, GPTQ / AWQ / compressed-tensors int4 at
groups of 32 .. 128) stay packed (4 bits: two codes a byte), in any activation dtype, and
are multiplied in float32 (as exact as the reference) by one of three paths, by the number
of rows (`RowLimits`): a few rows (a decode) by the GEMV kernel, which dequantizes each
weight block in registers for a handful of rows; more (a batch of decodes) by the GEMM
kernel, which dequantizes a few weight rows at a time into cache and multiplies every row
by them; many (a prefill) by dequantizing the weight for the call and running
`pagoda_cpu.ops.linear` in the dense dtype `pagoda_cpu.quant_ops` picks for the
activations. Other weights (other bit widths or group sizes) are `pagoda_cpu.quant_ops`'.

Against PyTorch's int4 kernel (`quant_ops`' choice for 4-bit weights and bfloat16
activations) on Zen 5 with native bf16: alone, 576->1536 Q4_1 at 1 row 34 us vs 28, at 16
rows 222 vs 124 (two threads, a shared machine); but in SmolLM2's whole decode step (one
core) 13.2 ms vs 14.4 at one sequence and 44.5 vs 43.3 at 16 (the int4 path's own extra
ops: the rounded zeros' correction, dtype copies), so the packed kernel serves them too.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pagoda.quant.tensors import GroupQuantWeight, round_activations
from pagoda_cpu import quant_ops
from pagoda_cpu.csrc import native
from pagoda_cpu.ops import linear

BLOCK = 32
"""The kernel's block of inputs: group sizes must be multiples of it."""


@dataclass(frozen=True)
class RowLimits:
    """Up to `gemv` rows the GEMV kernel, up to `gemm` the GEMM kernel, more: the weight
    dequantized for a dense matmul."""

    gemv: int
    gemm: int


ROW_LIMITS = {("avx512", torch.float32): RowLimits(gemv=8, gemm=128),
              ("avx512", torch.bfloat16): RowLimits(gemv=16, gemm=16)}
"""(instruction set, dense dtype) -> RowLimits. Measured (`python ci/bench_cpu_csrc.py
--reps 50`, its last table; 2 Zen 5 cores), GEMV / GEMM / dequantize + oneDNN in float32,
576->3072 Q4_1: at 8 rows 192 / 176 / 306 us, at 64 rows 1555 / 1115 / 1234, at 512 rows
12.3 / 10.0 / 9.0 ms (the rows no longer stay in cache; 1536->576 likewise), at 2048 rows
49.7 / 46.4 / 35.0 ms; the limit between (at 128 rows 3.0 / 2.1 / 2.2 ms, measured the
same way alone). With bfloat16 activations a bfloat16 matmul of the dequantized
weight beats the float32 kernels above 16 rows."""
ROW_LIMITS_OTHERWISE = RowLimits(gemv=4, gemm=128)
"""Other builds. The AVX2 one (a GEMM tile of 4 x 3 eight-lane dot products), measured the
same way with the AVX2 environment of ci/bench_smollm2_cpu.py on the same CPU, 576->3072: at 8 rows 288 / 193 us, at 16 rows 643 / 400 / 599, at 64 rows
2226 / 1123 / 1368, at 128 rows 4445 / 2236 / 2387; the GEMV kernel ahead up to 4 rows."""
DEQUANTIZE_MAX_BYTES = 32 * 2**20
"""Largest dense copy of a weight made per call: a larger one (a vocabulary table read as
the LM head) is written to memory, not cache, so the packed kernels serve every row count.
Measured, AVX2 build on 2 Zen 5 cores, the 49152x576 Q8_0 table at 16 rows: kernel 9.7 ms,
dequantize + linear 44 ms (at one row 1.1 against 37)."""


@dataclass(frozen=True)
class PackedWoqWeight:
    """A weight for the native kernel: codes [N, K * bits / 8] (4 bits: byte j of a block
    of 32 inputs holds input j in its low nibble and j + 16 in its high one), float32
    scales and offsets [N, groups], the dtype a dense copy takes for many rows, and up to
    how many rows each kernel runs (`RowLimits`). Symmetric codes (every offset -2**(bits-1)
    times its scale: GGUF Q4_0 and Q8_0, GPTQ's symmetric int4) keep no offsets (an empty
    tensor), which the kernels derive: at groups of 32, a sixth fewer bytes to read for
    4-bit codes, a tenth for 8-bit ones."""

    codes: torch.Tensor
    scales: torch.Tensor
    offsets: torch.Tensor
    bits: int
    dense_dtype: torch.dtype
    gemv_max_rows: int
    gemm_max_rows: int | None
    """None: never dequantized per call (the GEMM kernel takes every count above GEMV's)."""
    act_block: int
    """32: x rounded to int8 blocks first (`GroupQuantWeight.act_block`; the GEMV kernel
    then sums each block's products in integers); 0: x as it is."""

    def storage_bytes(self) -> int:
        """Bytes the weight holds."""
        return sum(t.untyped_storage().nbytes() for t in (self.codes, self.scales, self.offsets))


def native_reason(weight: GroupQuantWeight) -> str | None:
    """Why the native kernel does not take this weight, or None."""
    if native() is None:
        return "the native kernels are not built"
    if weight.bits not in (4, 8):
        return f"no native kernel for {weight.bits}-bit codes"
    if weight.act_block not in (None, BLOCK):
        return f"activations rounded in blocks of {weight.act_block}, not {BLOCK}"
    blocks = weight.group_size // BLOCK
    if weight.group_size % BLOCK or blocks & (blocks - 1):
        return f"groups of {weight.group_size} are not {BLOCK} times a power of two"
    return None


def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """uint8 codes [N, K] in the kernel's layout (see PackedWoqWeight)."""
    codes = codes.to(torch.uint8).contiguous()
    if bits == 8:
        return codes
    n, k = codes.shape
    halves = codes.view(n, k // BLOCK, 2, BLOCK // 2)
    return (halves[:, :, 0] | (halves[:, :, 1] << 4)).reshape(n, k // 2).contiguous()


def prepare_woq(weight: GroupQuantWeight, dtype: torch.dtype, *,
                native_bf16: bool | None = None,
                native_fp16: bool | None = None) -> PackedWoqWeight | quant_ops.CpuQuantWeight:
    """Packed for the native kernel where it takes the weight, else `quant_ops`'."""
    if native_reason(weight) is not None:
        return quant_ops.prepare_woq(weight, dtype, native_bf16=native_bf16,
                                     native_fp16=native_fp16)
    dense = quant_ops.dense_dtypes(
        quant_ops.fast_bf16() if native_bf16 is None else native_bf16,
        quant_ops.fast_fp16() if native_fp16 is None else native_fp16).get(dtype, torch.float32)
    kernels = native()
    assert kernels is not None  # native_reason says so
    n, k = weight.codes.shape
    limits = ROW_LIMITS.get((kernels.isa(), dense), ROW_LIMITS_OTHERWISE)
    dequantizable = n * k * dense.itemsize <= DEQUANTIZE_MAX_BYTES
    scales, offsets = weight.scales.float().contiguous(), weight.offsets.float().contiguous()
    if torch.equal(offsets, scales * -(1 << (weight.bits - 1))):
        offsets = offsets.new_empty(0)
    return PackedWoqWeight(pack_codes(weight.codes, weight.bits), scales, offsets, weight.bits,
                           dense, limits.gemv, limits.gemm if dequantizable else None,
                           weight.act_block or 0)


def woq_linear(x: torch.Tensor, weight: PackedWoqWeight | quant_ops.CpuQuantWeight,
               bias: torch.Tensor | None = None) -> torch.Tensor:
    if type(weight) is not PackedWoqWeight:
        return quant_ops.woq_linear(x, weight, bias)
    kernels = native()
    assert kernels is not None  # prepare packs only where the kernels run
    packed = (weight.codes, weight.scales, weight.offsets, weight.bits, bias, weight.act_block)
    if x.dtype == torch.float32 and x.dim() == 2 and x.shape[0] <= weight.gemv_max_rows:
        # A decode step's linears, four a layer: straight to the kernel, whose float32
        # [rows, N] is the answer as it is (no reshape, conversion or view around it).
        return kernels.woq_gemv(x, *packed)
    flat = x.reshape(-1, x.shape[-1])
    rows = flat.shape[0]
    if rows <= weight.gemv_max_rows:
        y = kernels.woq_gemv(flat, *packed)
    elif weight.gemm_max_rows is None or rows <= weight.gemm_max_rows:
        y = kernels.woq_gemm(flat, *packed)
    else:
        dense = weight.dense_dtype
        w = kernels.woq_dequantize(weight.codes, weight.scales, weight.offsets, weight.bits)
        if weight.act_block:  # the rounded values are not 16-bit ones: float32 throughout
            flat, dense = round_activations(flat, weight.act_block), torch.float32
        y = linear(flat.to(dense), w.to(dense), None if bias is None else bias.to(dense))
    return y.to(x.dtype).view(*x.shape[:-1], y.shape[-1])
