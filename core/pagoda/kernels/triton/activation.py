"""Gated activations: act(x[..., :d]) * x[..., d:] in float32, for SiLU and GELU (erf or
tanh approximation)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.kernels.triton.common import pow2, rows, wait_for_prior_kernels
from pagoda.kernels.triton.launch import DEFAULT_LAUNCH, TritonLaunch

BLOCK = 1024

_SILU, _GELU, _GELU_TANH = 0, 1, 2
_GELU_KINDS = {"none": _GELU, "tanh": _GELU_TANH}


@triton.jit
def _gated_kernel(out_ptr, x_ptr, d, stride_out, stride_x, ACT: tl.constexpr,
                  BLOCK: tl.constexpr, PDL: tl.constexpr):
    wait_for_prior_kernels(PDL)
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < d
    gate = tl.load(x_ptr + row * stride_x + offs, mask=ok, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * stride_x + d + offs, mask=ok, other=0.0).to(tl.float32)
    if ACT == 0:  # silu
        act = gate / (1.0 + tl.exp(-gate))
    elif ACT == 1:  # gelu, exact
        act = 0.5 * gate * (1.0 + tl.math.erf(gate * 0.7071067811865476))
    else:  # gelu, tanh approximation; tanh(z) = 1 - 2 / (exp(2z) + 1)
        z = 0.7978845608028654 * (gate + 0.044715 * gate * gate * gate)
        act = 0.5 * gate * (2.0 - 2.0 / (tl.exp(2.0 * z) + 1.0))
    tl.store(out_ptr + row * stride_out + offs, (act * up).to(out_ptr.dtype.element_ty), mask=ok)


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


def gelu_and_mul(x: torch.Tensor, approximate: str = "none", *,
                 launch: TritonLaunch = DEFAULT_LAUNCH) -> torch.Tensor:
    """See `pagoda.ops.reference.gelu_and_mul`."""
    if approximate not in _GELU_KINDS:
        raise ValueError(f"gelu approximate={approximate!r} (expected 'none' or 'tanh')")
    return _gated(x, _GELU_KINDS[approximate], launch)
