"""The `xla` attention backend: static-shape paged attention that any XLA device runs."""

from __future__ import annotations

import torch

from pagoda.attention import AttentionBackend, AttentionImpl, AttentionMetadata, KVCacheSpec
from pagoda_tpu.paged_attention import paged_attention, write_kv


class XlaAttentionImpl(AttentionImpl):
    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: AttentionMetadata,
    ) -> torch.Tensor:
        write_kv(key, value, kv_cache, metadata.slot_mapping)
        return paged_attention(
            query, kv_cache, metadata.block_tables, metadata.query_start_loc,
            metadata.seq_lens, self.scale, self.sliding_window, self.logits_soft_cap,
        )


class XlaAttentionBackend(AttentionBackend):
    """Gathers each token's keys through the block table and masks by position; reads
    only device tensors, so a padded step compiles once per bucket."""

    name = "xla"
    supported_kv_cache_dtypes = AttentionBackend.supported_dtypes  # no fp8 KV cache
    needs_zeroed_cache = True  # masked-out slots are weighed by 0, and 0 * NaN is NaN

    @classmethod
    def get_impl_cls(cls) -> type[AttentionImpl]:
        return XlaAttentionImpl

    @classmethod
    def kv_cache_shape(cls, spec: KVCacheSpec, num_blocks: int) -> tuple[int, ...]:
        """Core's layout plus one block that padding tokens write into (see `write_kv`)."""
        return spec.shape(num_blocks + 1)
