"""CPU providers of the core ops: the same meaning as the references, fewer passes."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # PyTorch's fused kernel accumulates low-precision inputs in float32.
    return F.rms_norm(x, (x.shape[-1],), weight.to(x.dtype), eps)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    summed = (x + residual).to(x.dtype)
    return rms_norm(summed, weight, eps), summed


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """In the input dtype: one extra rounding against the reference, within conformance."""
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


def gelu_and_mul(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """In the input dtype, like `silu_and_mul`."""
    d = x.shape[-1] // 2
    return F.gelu(x[..., :d], approximate=approximate) * x[..., d:]
