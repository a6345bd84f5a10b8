"""Gated activations: act(x[..., :d]) * x[..., d:] in float32, for SiLU and GELU (erf or
tanh approximation); and SiLU-and-mul with its output quantized per token for a W8A8 linear
(`silu_and_mul_quant`)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.kernels.triton.common import interpreted, pow2, rows, wait_for_prior_kernels
from pagoda.kernels.triton.launch import DEFAULT_LAUNCH, TritonLaunch
from pagoda.kernels.triton.quant_prims import (
    ONE_PASS_INPUTS_A_WARP,
    ONE_PASS_MAX,
    ONE_PASS_MAX_WARPS,
    _row_scale,
    _store_codes,
    quantize_activations,
)
from pagoda.quant.tensors import MIN_SCALE, QuantizedActivation, check_activation_code

BLOCK = 1024

_SILU, _GELU, _GELU_TANH = 0, 1, 2
_GELU_KINDS = {"none": _GELU, "tanh": _GELU_TANH}


@triton.jit
def _gated_values(x_row, d, offs, ok, ACT: tl.constexpr):
    """act(gate) * up of the inputs `offs` of a row (at x_row), in float32."""
    gate = tl.load(x_row + offs, mask=ok, other=0.0).to(tl.float32)
    up = tl.load(x_row + d + offs, mask=ok, other=0.0).to(tl.float32)
    if ACT == 0:  # silu
        act = gate / (1.0 + tl.exp(-gate))
    elif ACT == 1:  # gelu, exact
        act = 0.5 * gate * (1.0 + tl.math.erf(gate * 0.7071067811865476))
    else:  # gelu, tanh approximation; tanh(z) = 1 - 2 / (exp(2z) + 1)
        z = 0.7978845608028654 * (gate + 0.044715 * gate * gate * gate)
        act = 0.5 * gate * (2.0 - 2.0 / (tl.exp(2.0 * z) + 1.0))
    return act * up


@triton.jit
def _gated_kernel(out_ptr, x_ptr, d, stride_out, stride_x, ACT: tl.constexpr,
                  BLOCK: tl.constexpr, PDL: tl.constexpr):
    wait_for_prior_kernels(PDL)
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < d
    y = _gated_values(x_ptr + row * stride_x, d, offs, ok, ACT)
    tl.store(out_ptr + row * stride_out + offs, y.to(out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _silu_and_mul_quant_kernel(q_ptr, s_ptr, x_ptr, d, stride_q, stride_x, INT8: tl.constexpr,
                               BLOCK: tl.constexpr, EXACT: tl.constexpr, PDL: tl.constexpr):
    """One row's silu(gate) * up (as `_gated_kernel` computes it, rounded to x's type) as
    codes and a float32 scale per token, from one load of the row (d <= BLOCK), rounded as
    `quant_prims._act_quant_kernel` rounds it."""
    QMAX: tl.constexpr = 127.0 if INT8 else 448.0
    wait_for_prior_kernels(PDL)
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    ok = offs < d
    y = _gated_values(x_ptr + row * stride_x, d, offs, ok, 0)  # silu
    y = y.to(x_ptr.dtype.element_ty).to(tl.float32)
    scale = _row_scale(tl.where(ok, tl.abs(y), 0.0), QMAX)
    tl.store(s_ptr + row, scale)
    _store_codes(q_ptr + row * stride_q + offs, y, scale, ok, INT8, EXACT)


def _gated(x: torch.Tensor, act: int, launch: TritonLaunch) -> torch.Tensor:
    d = x.shape[-1] // 2
    x2 = rows(x, 2 * d)
    out = torch.empty((*x.shape[:-1], d), dtype=x.dtype, device=x.device)
    out2 = out.view(-1, d)
    block = min(pow2(d), BLOCK)
    if x2.shape[0] and d:
        _gated_kernel[(x2.shape[0], triton.cdiv(d, block))](
            out2, x2, d, out2.stride(0), x2.stride(0), ACT=act, BLOCK=block,
            **launch.elementwise.kwargs(), **launch.dependency("elementwise"))
    return out


def silu_and_mul(x: torch.Tensor, *, launch: TritonLaunch = DEFAULT_LAUNCH) -> torch.Tensor:
    """See `pagoda.ops.reference.silu_and_mul`."""
    return _gated(x, _SILU, launch)


def silu_and_mul_quant(x: torch.Tensor, code_dtype: torch.dtype, *,
                       launch: TritonLaunch = DEFAULT_LAUNCH) -> QuantizedActivation:
    """See `pagoda.ops.reference.silu_and_mul_quant`: codes [M, d] and float32 scales
    [M, 1] (M: all leading dims), the same bit for bit as `silu_and_mul` followed by
    `quant_prims.quantize_activations`. Rows that fit one load (pow2(d) <= ONE_PASS_MAX):
    one launch, one program a row, warps as `quantize_activations` takes for such rows;
    wider rows: those two kernels, one after the other (the output written and read back)."""
    check_activation_code(code_dtype)
    int8 = code_dtype == torch.int8
    d = x.shape[-1] // 2
    block = pow2(d, 16)
    if block > ONE_PASS_MAX:
        codes, scale = quantize_activations(rows(silu_and_mul(x, launch=launch), d), int8)
        return QuantizedActivation(codes, scale, x.dtype)
    x2 = rows(x, 2 * d)
    m = x2.shape[0]
    codes = torch.empty((m, d), dtype=code_dtype, device=x.device)
    scale = torch.empty((m, 1), dtype=torch.float32, device=x.device)
    if m == 0 or d == 0:
        return QuantizedActivation(codes, scale.fill_(MIN_SCALE), x.dtype)
    warps = min(ONE_PASS_MAX_WARPS, max(4, block // ONE_PASS_INPUTS_A_WARP))
    _silu_and_mul_quant_kernel[(m,)](
        codes, scale, x2, d, codes.stride(0), x2.stride(0), INT8=int8, BLOCK=block,
        EXACT=interpreted(_silu_and_mul_quant_kernel), num_warps=warps,
        **launch.dependency("elementwise"))
    return QuantizedActivation(codes, scale, x.dtype)


def gelu_and_mul(x: torch.Tensor, approximate: str = "none", *,
                 launch: TritonLaunch = DEFAULT_LAUNCH) -> torch.Tensor:
    """See `pagoda.ops.reference.gelu_and_mul`."""
    if approximate not in _GELU_KINDS:
        raise ValueError(f"gelu approximate={approximate!r} (expected 'none' or 'tanh')")
    return _gated(x, _GELU_KINDS[approximate], launch)
