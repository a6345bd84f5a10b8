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


def reshape_and_cache(key, value, kv_cache, slot_mapping):
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    block_size = kv_cache.shape[2]
    pair = torch.stack((key[keep], value[keep])).to(kv_cache.dtype)  # [2, n, K, D]
    kv_cache[:, slots // block_size, slots % block_size] = pair


def paged_attention(query, kv_cache, block_tables, query_start_loc, seq_lens, scale,
                    sliding_window=None, logits_soft_cap=None):
    """Online-softmax over one KV block at a time: the shape an accelerator kernel takes."""
    out = torch.zeros_like(query, dtype=torch.float32)
    block_size, num_kv = kv_cache.shape[2], kv_cache.shape[3]
    group = query.shape[1] // num_kv
    for b, seq_len in enumerate(seq_lens.tolist()):
        start, end = int(query_start_loc[b]), int(query_start_loc[b + 1])
        if end == start:
            continue
        q = query[start:end].to(torch.float32)  # [q, H, D]
        q_pos = torch.arange(seq_len - (end - start), seq_len)[:, None, None]  # [q, 1, 1]
        running_max = torch.full(q.shape[:2] + (1,), -math.inf)
        denom = torch.zeros(q.shape[:2] + (1,))
        acc = torch.zeros_like(q)
        for i in range(-(-seq_len // block_size)):
            block = int(block_tables[b, i])
            n = min(block_size, seq_len - i * block_size)
            k = kv_cache[0, block, :n].to(torch.float32).repeat_interleave(group, 1)  # [n,H,D]
            v = kv_cache[1, block, :n].to(torch.float32).repeat_interleave(group, 1)
            s = torch.einsum("qhd,nhd->qhn", q, k) * scale
            if logits_soft_cap is not None:
                s = logits_soft_cap * torch.tanh(s / logits_soft_cap)
            k_pos = torch.arange(i * block_size, i * block_size + n)[None, None, :]
            visible = k_pos <= q_pos
            if sliding_window is not None:
                visible &= k_pos > q_pos - sliding_window
            s = s.masked_fill(~visible, -math.inf)
            new_max = torch.maximum(running_max, s.amax(-1, keepdim=True))
            safe_max = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
            p = torch.exp(s - safe_max)
            correction = torch.exp(running_max - safe_max)
            denom = denom * correction + p.sum(-1, keepdim=True)
            acc = acc * correction + torch.einsum("qhn,nhd->qhd", p, v)
            running_max = new_max
        out[start:end] = acc / denom
    return out.to(query.dtype)
