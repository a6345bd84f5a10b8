"""The CPU attention backend: paged KV cache + PyTorch SDPA per sequence."""

from __future__ import annotations

import torch

from pagoda.attention import FP8_KV_CACHE_DTYPE, AttentionBackend, AttentionImpl, AttentionMetadata
from pagoda_cpu.paged_attention import decode_step, paged_attention, write_kv_cache


class CpuSdpaAttentionImpl(AttentionImpl):
    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: AttentionMetadata,
        *,
        kv_scales: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if kv_scales is None:
            out = decode_step(query, key, value, kv_cache, metadata, self.scale,
                              self.sliding_window, self.logits_soft_cap)
            if out is not None:
                return out
        write_kv_cache(key, value, kv_cache, metadata.slot_mapping, kv_scales)
        return paged_attention(
            query, kv_cache, metadata.block_tables, metadata.query_start_loc_cpu,
            metadata.seq_lens_cpu, self.scale, self.sliding_window, self.logits_soft_cap,
            kv_scales,
        )


class CpuSdpaAttentionBackend(AttentionBackend):
    name = "cpu_sdpa"
    supported_kv_cache_dtypes = (torch.float32, torch.bfloat16, torch.float16,
                                 FP8_KV_CACHE_DTYPE)

    @classmethod
    def get_impl_cls(cls) -> type[AttentionImpl]:
        return CpuSdpaAttentionImpl
