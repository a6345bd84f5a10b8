"""CPU providers on pagoda-cpu's native kernels (`pagoda_cpu.csrc`).

`woq_linear` ("cpu_csrc"): 4- and 8-bit weights with a scale and offset per group of 32
times a power of two inputs (GGUF Q4_0 / Q4_1 / Q8_0, GPTQ / AWQ / compressed-tensors int4 at
groups of 32 .. 128) stay packed (4 bits: two codes a byte), in any activation dtype. Up
to GEMV_MAX_ROWS rows (decode) the kernel dequantizes in registers and sums in float32
(as exact as the reference); more rows (prefill) dequantize the weight for the call and
run `pagoda_cpu.ops.linear` in the dense dtype `pagoda_cpu.quant_ops` picks for the activations.
Other weights (other bit widths or group sizes) are `pagoda_cpu.quant_ops`' as before.

Against PyTorch's int4 kernel (`quant_ops`' choice for 4-bit weights and bfloat16
activations) on Zen 5 with native bf16: alone, 576->1536 Q4_1 at 1 row 34 us vs 28, at 16
rows 222 vs 124 (two threads, a shared machine); but in SmolLM2's whole decode step (one
core) 13.2 ms vs 14.4 at one sequence and 44.5 vs 43.3 at 16 (the int4 path's own extra
ops: the rounded zeros' correction, dtype copies), so the packed kernel serves them too.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pagoda.quant.tensors import GroupQuantWeight
from pagoda_cpu import quant_ops
from pagoda_cpu.csrc import native
from pagoda_cpu.ops import linear

BLOCK = 32
"""The kernel's block of inputs: group sizes must be multiples of it."""
GEMV_MAX_ROWS = {("avx512", torch.float32): 48, ("avx512", torch.bfloat16): 16}
"""(instruction set, dense dtype) -> up to how many rows the packed kernel runs; above,
the weight is dequantized for the call and multiplied densely (the kernel's cost grows
with the rows, the dequantization's does not). Measured (one thread, a shared Zen 5):
576->1536 Q4_1 at 16 rows, kernel 204 us vs dequantize +
bf16 matmul 226, at 32 rows 401 vs 289; against a float32 matmul 410 vs 673 at 32 rows,
825 vs 1192 at 64; the AVX2 build against float32, 460 vs 414 at 16 rows, 233 vs 275 at 8."""
GEMV_MAX_ROWS_OTHERWISE = 12
DEQUANTIZE_MAX_BYTES = 32 * 2**20
"""Largest dense copy of a weight made per call: a larger one (a vocabulary table read as
the LM head) is written to memory, not cache, so the packed kernel serves every row count.
Measured, AVX2 build on 2 Zen 5 cores, the 49152x576 Q8_0 table at 16 rows: kernel 9.7 ms,
dequantize + linear 44 ms (at one row 1.1 against 37)."""


@dataclass(frozen=True)
class PackedWoqWeight:
    """A weight for the native kernel: codes [N, K * bits / 8] (4 bits: byte j of a block
    of 32 inputs holds input j in its low nibble and j + 16 in its high one), float32
    scales and offsets [N, groups], the dtype a dense copy takes for many rows, and up to how many rows the kernel runs."""

    codes: torch.Tensor
    scales: torch.Tensor
    offsets: torch.Tensor
    bits: int
    dense_dtype: torch.dtype
    gemv_max_rows: int

    def storage_bytes(self) -> int:
        """Bytes the weight holds."""
        return sum(t.untyped_storage().nbytes() for t in (self.codes, self.scales, self.offsets))


def native_reason(weight: GroupQuantWeight) -> str | None:
    """Why the native kernel does not take this weight, or None."""
    if native() is None:
        return "the native kernels are not built"
    if weight.bits not in (4, 8):
        return f"no native kernel for {weight.bits}-bit codes"
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
    rows = GEMV_MAX_ROWS.get((kernels.isa(), dense), GEMV_MAX_ROWS_OTHERWISE)
    if n * k * dense.itemsize > DEQUANTIZE_MAX_BYTES:
        rows = 2**62  # never dequantized per call
    return PackedWoqWeight(pack_codes(weight.codes, weight.bits),
                           weight.scales.float().contiguous(), weight.offsets.float().contiguous(),
                           weight.bits, dense, rows)


def woq_linear(x: torch.Tensor, weight: PackedWoqWeight | quant_ops.CpuQuantWeight,
               bias: torch.Tensor | None = None) -> torch.Tensor:
    if type(weight) is not PackedWoqWeight:
        return quant_ops.woq_linear(x, weight, bias)
    kernels = native()
    assert kernels is not None  # prepare packs only where the kernels run
    if x.dtype == torch.float32 and x.dim() == 2 and x.shape[0] <= weight.gemv_max_rows:
        # A decode step's linears, four a layer: straight to the kernel, whose float32
        # [rows, N] is the answer as it is (no reshape, conversion or view around it).
        return kernels.woq_gemv(x, weight.codes, weight.scales, weight.offsets, weight.bits,
                                bias)
    flat = x.reshape(-1, x.shape[-1])
    if flat.shape[0] <= weight.gemv_max_rows:
        y = kernels.woq_gemv(flat, weight.codes, weight.scales, weight.offsets, weight.bits,
                             bias)
    else:
        dense = weight.dense_dtype
        w = kernels.woq_dequantize(weight.codes, weight.scales, weight.offsets, weight.bits)
        y = linear(flat.to(dense), w.to(dense), None if bias is None else bias.to(dense))
    return y.to(x.dtype).view(*x.shape[:-1], y.shape[-1])
