"""The template attention backend: its own paged-attention kernel over the paged cache,
written independently of core's reference (`pagoda.attention.reference`) and certified
against it by the attention conformance tests. Replace the kernels with your SDK's."""

from __future__ import annotations

import math

import torch

from pagoda.attention import AttentionBackend, AttentionImpl


def write_kv_cache(key, value, kv_cache, slot_mapping):
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


class TemplateAttentionImpl(AttentionImpl):
    def forward(self, query, key, value, kv_cache, metadata):
        write_kv_cache(key, value, kv_cache, metadata.slot_mapping)
        return paged_attention(query, kv_cache, metadata.block_tables, metadata.query_start_loc,
                               metadata.seq_lens, self.scale, self.sliding_window,
                               self.logits_soft_cap)


class TemplateAttentionBackend(AttentionBackend):
    name = "template"
    # KV cache dtypes its kernels write and read. No fp8 (torch.float8_e4m3fn): a backend
    # that adds it takes `kv_scales` in forward (see AttentionImpl.forward).
    supported_kv_cache_dtypes = (torch.float32, torch.float16, torch.bfloat16)

    @classmethod
    def get_impl_cls(cls) -> type[AttentionImpl]:
        return TemplateAttentionImpl
