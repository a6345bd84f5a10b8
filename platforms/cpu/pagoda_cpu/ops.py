"""CPU providers of the core ops: the same meaning as the references, fewer passes."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F


@functools.cache
def _onednn_linear() -> Callable[..., torch.Tensor] | None:
    """PyTorch's oneDNN linear (`torch.ops.mkldnn._linear_pointwise`, what its inductor
    compiles CPU linears to), where this build has oneDNN; else None."""
    if not torch.backends.mkldnn.is_available():
        return None
    return getattr(torch.ops.mkldnn, "_linear_pointwise", None)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """float32 through oneDNN, which picks its kernels by this CPU's instruction set, where
    PyTorch has it; F.linear (MKL's sgemm for float32, oneDNN already for 16-bit types)
    otherwise. `python ci/bench_cpu_linear.py`, SmolLM2's shapes on 2 Zen 5 cores: oneDNN
    takes 0.5-0.95x MKL's time for a layer at 1-512 rows (one case at 1.09) and 0.4-0.7x
    for the 49152-row LM head, on the AVX-512 path and on the AVX2 one
    (`ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2`) alike."""
    onednn = _onednn_linear()
    if onednn is None or not x.dtype == weight.dtype == torch.float32 or (
            bias is not None and bias.dtype != torch.float32):
        return F.linear(x, weight, bias)
    return onednn(x, weight.contiguous(), bias, "none", [], "")


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


def fused_moe(hidden: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
              topk_weights: torch.Tensor, topk_ids: torch.Tensor) -> torch.Tensor:
    """Tokens grouped by expert (a stable sort of the choices), then one pair of matmuls
    per expert that has tokens; the activation in the input dtype, as `silu_and_mul`."""
    top_k = topk_ids.shape[1]
    choices = topk_ids.flatten()
    order = torch.argsort(choices, stable=True)
    counts = torch.bincount(choices + 1, minlength=w13.shape[0] + 1).tolist()
    order = order[counts[0]:]  # the skipped choices (-1) sort first
    tokens = order // top_k
    x = hidden[tokens]
    y = torch.empty_like(x)
    start = 0
    for expert, count in enumerate(counts[1:]):
        if count:
            rows = slice(start, start + count)
            y[rows] = F.linear(silu_and_mul(F.linear(x[rows], w13[expert])), w2[expert])
            start += count
    weighted = y.float() * topk_weights.flatten()[order, None]
    out = torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device)
    return out.index_add_(0, tokens, weighted).to(hidden.dtype)
