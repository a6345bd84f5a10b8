"""The template's kernels: written independently of core's references, checked against
them by the conformance tests. Replace each with a call into your SDK."""

from __future__ import annotations

import math

import torch


def is_available() -> str | None:
    """None when these kernels can run here, else why not (e.g. "driver too old")."""
    return None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.to(torch.float32)
    inv_rms = (xf.square().sum(-1, keepdim=True) / x.shape[-1] + eps).rsqrt()
    return (xf * inv_rms * weight.to(torch.float32)).to(x.dtype)


def fused_add_rms_norm(x, residual, weight, eps):
    summed = (x.to(torch.float32) + residual.to(torch.float32)).to(x.dtype)
    return rms_norm(summed, weight, eps), summed


def rotary_embedding(positions, query, key, cos_sin_cache, is_neox):
    half = cos_sin_cache.shape[-1] // 2
    cos = cos_sin_cache[positions, :half].to(torch.float32)[:, None, :]
    sin = cos_sin_cache[positions, half:].to(torch.float32)[:, None, :]

    def rotate(x: torch.Tensor) -> torch.Tensor:
        out = x.clone()
        xf = x[..., : 2 * half].to(torch.float32)
        if is_neox:
            a, b = xf[..., :half], xf[..., half:]
            out[..., :half] = (a * cos - b * sin).to(x.dtype)
            out[..., half : 2 * half] = (b * cos + a * sin).to(x.dtype)
        else:
            a, b = xf[..., 0::2], xf[..., 1::2]
            out[..., 0 : 2 * half : 2] = (a * cos - b * sin).to(x.dtype)
            out[..., 1 : 2 * half : 2] = (b * cos + a * sin).to(x.dtype)
        return out

    return rotate(query), rotate(key)


def silu_and_mul(x):
    d = x.shape[-1] // 2
    gate, up = x[..., :d].to(torch.float32), x[..., d:].to(torch.float32)
    return (gate * torch.sigmoid(gate) * up).to(x.dtype)


def gelu_and_mul(x, approximate="none"):
    d = x.shape[-1] // 2
    g, up = x[..., :d].to(torch.float32), x[..., d:].to(torch.float32)
    if approximate == "tanh":
        act = 0.5 * g * (1 + torch.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g.pow(3))))
    else:
        act = 0.5 * g * (1 + torch.erf(g / math.sqrt(2)))
    return (act * up).to(x.dtype)
