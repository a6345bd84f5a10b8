"""The quantized linears on GPUs: `prepare_*` (once per layer, at load) and the ops' impls
(`pagoda.ops.quant_reference` says what they compute), choosing a kernel by the number of
rows M of x:

fp8_linear (float8 e4m3 weights, activations quantized per token, by a static scale, or
per token and group of bk inputs for (bn, bk)-blocked weights):
  M = 1, per-row       `row_gemv.fp8_row_gemv` (packed PTX conversions of the codes)
  M <= GEMV_MAX_ROWS   `_qgemv_kernel` (quantizes x itself up to FUSED_MAX_ROWS rows)
  larger, per-row      activations quantized once, then torch._scaled_mm (CUDA, bfloat16
                       models, K and N multiples of 16), else `_qgemm_kernel`
  larger, blocked      activations quantized per group, then `_qgemm_kernel`
int8_linear (int8 weights and activations, exact int32 sums):
  M <= GEMV_MAX_ROWS   `_qgemv_kernel`
  larger               activations quantized once, then `_qgemm_kernel` (on the H200 it
                       beat torch._int_mm + a scaling epilogue by 1.6-1.8x at M = 1024
                       on every 8B shape, ci/bench_quant_kernels.py)
woq_linear (4- or 8-bit codes per group, x as it is, or first rounded to int8 blocks in
float32 where the weight says so: a GGUF's, `GroupQuantWeight.act_block`):
  M <= DOT_MIN_ROWS - 1 `_woq_gemv_kernel`
  M <= DOT_MAX_ROWS    4-bit codes, 16-bit x: `woq_dot._woq_dot_kernel` (tensor cores; on
                       the H100 1.1-2x faster than the gemv from 3-4 rows on and than the
                       gemm up to 16, slower than the gemv at 1-2 rows)
  M <= WOQ_GEMV_ROWS   `_woq_gemv_kernel`, else `_woq_gemm_kernel`
fp8_linear and int8_linear given x quantized (a `QuantizedActivation` of their code type,
from `norm.fused_add_rms_norm_quant` or `activation.silu_and_mul_quant`):
  per-row weight, no static input scale, M > FUSED_MAX_ROWS (`quantized_input`, the
                       provider hook: exactly where they would quantize x per token
                       themselves with `quantize_activations`)
                       its codes and scales go where `quantize_activations`' would (the
                       pre-quantized `_qgemv_kernel`, torch._scaled_mm or `_qgemm_kernel`),
                       so the output is the same bit for bit
  anything else        ValueError

Outputs are in x's type; the arithmetic in float32 (int32 for int8 products). `launch`:
the platform's launch parameters, of which the one-row kernels take the dependent launch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from pagoda.kernels.triton.common import rows
from pagoda.kernels.triton.launch import DEFAULT_LAUNCH, TritonLaunch
from pagoda.kernels.triton.quant_prims import quantize_activations
from pagoda.kernels.triton.row_gemv import fp8_ok_for_row, fp8_row_gemv
from pagoda.kernels.triton.scaled_gemm import FUSED_MAX_ROWS, GEMV_MAX_ROWS, qgemm, qgemv
from pagoda.kernels.triton.woq_dot import DOT_MAX_ROWS, woq_dot, woq_dot_supports
from pagoda.kernels.triton.woq_gemm import GEMV_MAX_ROWS as WOQ_GEMV_ROWS
from pagoda.kernels.triton.woq_gemm import PackedGroupWeight, pack, woq_gemm, woq_gemv
from pagoda.quant.tensors import (
    FP8_DTYPE,
    Fp8Weight,
    GroupQuantWeight,
    Int8Weight,
    QuantizedActivation,
    given_codes,
    round_activations,
)

KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
SCALED_MM_DTYPES = (torch.bfloat16,)
"""Model types torch._scaled_mm serves with row-wise scales (its output is bfloat16)."""
MAX_BLOCK_K = 256
WOQ_GROUPS = (16, 32, 64, 128, 256)
DOT_MIN_ROWS = 3
"""Fewest rows `woq_linear` gives the tensor-core kernel (ci/bench_quant_kernels.py, H100:
at 2 rows the gemv took 130 us a layer of the 8B shapes against 149, at 4 rows 168)."""


ScaledWeight = Fp8Weight | Int8Weight
"""What the fp8 and int8 kernels take: the canonical weight, its tensors contiguous, the
scales float32 and a static input scale a [1] tensor."""


def _prepare_scaled(weight: ScaledWeight) -> ScaledWeight:
    static = weight.input_scale
    return dataclasses.replace(
        weight, weight=weight.weight.contiguous(), scale=weight.scale.float().contiguous(),
        input_scale=static.float().reshape(1).contiguous() if static is not None else None)


def prepare_fp8(weight: Fp8Weight, dtype: torch.dtype | None = None) -> ScaledWeight:
    """Row-major codes, float32 scales (contiguous); checks the block shape."""
    if weight.block is not None and not _block_ok(weight.block):
        raise ValueError(f"fp8 blocks {weight.block}: the kernels take bk a power of two "
                         f"from 16 to {MAX_BLOCK_K}")
    return _prepare_scaled(weight)


def prepare_int8(weight: Int8Weight, dtype: torch.dtype | None = None) -> ScaledWeight:
    return _prepare_scaled(weight)


def prepare_woq(weight: GroupQuantWeight,
                dtype: torch.dtype | None = None) -> PackedGroupWeight:
    """Codes packed into int32 words; scales and offsets contiguous, in their own type."""
    if weight.bits not in (4, 8) or weight.group_size not in WOQ_GROUPS:
        raise ValueError(f"{weight.bits}-bit codes in groups of {weight.group_size}: the "
                         f"kernels take 4 or 8 bits in groups of {WOQ_GROUPS}")
    return pack(weight)


def _block_ok(block: tuple[int, int]) -> bool:
    bn, bk = block
    return bn >= 1 and 16 <= bk <= MAX_BLOCK_K and bk & (bk - 1) == 0


def _out(x: torch.Tensor | QuantizedActivation, x2: torch.Tensor,
         n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The output [..., N] of x (rows x2, on their device) in x's type, and its [M, N] view."""
    out = torch.empty((*x.shape[:-1], n), dtype=x.dtype, device=x2.device)
    return out, out.view(-1, n)


def _empty_case(x2: torch.Tensor, out: torch.Tensor, out2: torch.Tensor,
                bias: torch.Tensor | None) -> torch.Tensor | None:
    """The output when there is nothing to multiply (no rows, columns or inputs)."""
    if out2.numel() == 0:
        return out
    if x2.shape[1] == 0:
        out2.copy_(bias.expand_as(out2) if bias is not None else torch.zeros_like(out2))
        return out
    return None


def quantized_input(weight: ScaledWeight, rows: int) -> bool:
    """Whether fp8_linear / int8_linear take x of `rows` rows already quantized per token (a
    `QuantizedActivation`) for `weight` (`KernelProvider.quantized_input`): exactly where
    they would quantize it so themselves with `quantize_activations` (no static input
    scale, no blocks, more rows than the gemv quantizes itself)."""
    return weight.input_scale is None and not weight.block and rows > FUSED_MAX_ROWS


def _check_given(x: QuantizedActivation, w: ScaledWeight, int8: bool) -> None:
    """Refuses x given quantized where the linear would not have quantized it so: another
    code type or scheme (`given_codes`), or few enough rows that the gemv quantizes x."""
    given_codes(x, w, torch.int8 if int8 else FP8_DTYPE)
    m = x.codes.shape[0]
    if not quantized_input(w, m):
        raise ValueError(f"{'int8' if int8 else 'fp8'}_linear given x quantized per token, "
                         f"but it quantizes x itself at {m} rows (<= {FUSED_MAX_ROWS}): ask "
                         f"`quantized_input` first")


def _scaled_linear(x: torch.Tensor | QuantizedActivation, w: ScaledWeight,
                   bias: torch.Tensor | None, int8: bool, launch: TritonLaunch) -> torch.Tensor:
    given = isinstance(x, QuantizedActivation)
    if given:
        _check_given(x, w, int8)
    x2 = x.codes if given else rows(x, x.shape[-1])
    (m, k), n = x2.shape, w.shape[0]
    out, out2 = _out(x, x2, n)
    if (done := _empty_case(x2, out, out2, bias)) is not None:
        return done
    static = w.input_scale
    if given:
        xq, xs = x.codes, x.scale
    elif m == 1 and not int8 and not w.block and fp8_ok_for_row(w.weight):
        fp8_row_gemv(out2, x2, static, w.weight, w.scale, bias, launch=launch)
        return out
    elif m <= GEMV_MAX_ROWS and not quantized_input(w, m):  # quantizes x itself
        qgemv(out2, x2, static, w.weight, w.scale, bias, x_mode=0 if static is None else 1,
              block=w.block)
        return out
    else:
        xq, xs = quantize_activations(x2, int8, static, w.block[1] if w.block else None)
    if m <= GEMV_MAX_ROWS and not w.block:
        qgemv(out2, xq, xs, w.weight, w.scale, bias, x_mode=2)
    elif not int8 and not w.block and _scaled_mm_ok(xq, x.dtype, k, n):
        torch._scaled_mm(xq, w.weight.t(), scale_a=xs, scale_b=w.scale.view(1, n),
                         out_dtype=x.dtype, out=out2)
        if bias is not None:
            out2.add_(bias)
    else:
        qgemm(out2, xq, xs, w.weight, w.scale, bias, block=w.block)
    return out


def _scaled_mm_ok(xq: torch.Tensor, dtype: torch.dtype, k: int, n: int) -> bool:
    """Whether torch._scaled_mm serves codes xq of activations of `dtype`."""
    return xq.is_cuda and dtype in SCALED_MM_DTYPES and k % 16 == 0 and n % 16 == 0


def fp8_linear(x: torch.Tensor | QuantizedActivation, weight: ScaledWeight,
               bias: torch.Tensor | None = None, *,
               launch: TritonLaunch = DEFAULT_LAUNCH) -> torch.Tensor:
    """See `pagoda.ops.quant_reference.fp8_linear`; `weight` from `prepare_fp8`; x given
    quantized only where `quantized_input` says so."""
    return _scaled_linear(x, weight, bias, False, launch)


def int8_linear(x: torch.Tensor | QuantizedActivation, weight: ScaledWeight,
                bias: torch.Tensor | None = None, *,
                launch: TritonLaunch = DEFAULT_LAUNCH) -> torch.Tensor:
    """See `pagoda.ops.quant_reference.int8_linear`; `weight` from `prepare_int8`; x given
    quantized only where `quantized_input` says so."""
    return _scaled_linear(x, weight, bias, True, launch)


def woq_linear(x: torch.Tensor, weight: PackedGroupWeight, bias: torch.Tensor | None = None, *,
               launch: TritonLaunch = DEFAULT_LAUNCH) -> torch.Tensor:
    """See `pagoda.ops.quant_reference.woq_linear`; `weight` from `prepare_woq`."""
    if weight.act_block:  # the rounded values in float32 (a 16-bit copy would round them again)
        return _woq_linear(round_activations(x, weight.act_block), weight,
                           None if bias is None else bias.float(), launch).to(x.dtype)
    return _woq_linear(x, weight, bias, launch)


def _woq_linear(x: torch.Tensor, weight: PackedGroupWeight, bias: torch.Tensor | None,
                launch: TritonLaunch) -> torch.Tensor:
    """x (as the kernels take it) times `weight` by the kernel for its row count."""
    k, n = x.shape[-1], weight.shape[0]
    x2 = rows(x, k)
    out, out2 = _out(x, x2, n)
    if (done := _empty_case(x2, out, out2, bias)) is not None:
        return done
    m = x2.shape[0]
    if DOT_MIN_ROWS <= m <= DOT_MAX_ROWS and woq_dot_supports(x2, weight):
        woq_dot(out2, x2, weight, bias, launch=launch)
    elif m <= WOQ_GEMV_ROWS:
        woq_gemv(out2, x2, weight, bias, launch=launch)
    else:
        woq_gemm(out2, x2, weight, bias)
    return out


def supports_fp8(dtype: torch.dtype | None = None, block: tuple[int, int] | None = None,
                 **_: Any) -> bool:
    """Model types float32, bfloat16, float16; per-row scales or blocks with bk a power of
    two from 16 to MAX_BLOCK_K."""
    return (dtype is None or dtype in KERNEL_DTYPES) and (block is None or _block_ok(block))


def supports_int8(dtype: torch.dtype | None = None, **_: Any) -> bool:
    return dtype is None or dtype in KERNEL_DTYPES


def supports_woq(dtype: torch.dtype | None = None, bits: int | None = None,
                 group_size: int | None = None, **_: Any) -> bool:
    """4- or 8-bit codes in groups of 16 to 256 (powers of two)."""
    return ((dtype is None or dtype in KERNEL_DTYPES) and bits in (None, 4, 8)
            and (group_size is None or group_size in WOQ_GROUPS))
