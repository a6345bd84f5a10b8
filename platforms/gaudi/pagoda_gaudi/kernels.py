"""FusedRMSNorm as the provider of `rms_norm` and `fused_add_rms_norm` on Gaudi (available
where `pagoda_gaudi.sdk.sdk_unavailable_reason` says so)."""

from __future__ import annotations

from typing import Any

import torch

from pagoda_gaudi.sdk import fused_rms_norm

KERNEL_DTYPES = (torch.bfloat16, torch.float32)


def supports(dtype: torch.dtype | None = None, **_: Any) -> bool:
    return dtype is None or dtype in KERNEL_DTYPES


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """See `pagoda.ops.reference.rms_norm`. FusedRMSNorm takes 3-D input and one dtype."""
    x3 = x.reshape(-1, 1, x.shape[-1])
    out = fused_rms_norm().apply(x3, weight.to(x.dtype), eps)
    return out.reshape(x.shape)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """See `pagoda.ops.reference.fused_add_rms_norm`: the sum in x's dtype, then the norm."""
    summed = (x.float() + residual.float()).to(x.dtype)
    return rms_norm(summed, weight, eps), summed
