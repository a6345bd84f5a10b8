"""The reference attention backend: plain PyTorch, any device, defines correctness."""

from __future__ import annotations

import torch

from pagoda.attention.backend import AttentionBackend, AttentionImpl, AttentionMetadata
from pagoda.ops import reference


class ReferenceAttentionImpl(AttentionImpl):
    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: AttentionMetadata,
    ) -> torch.Tensor:
        reference.reshape_and_cache(key, value, kv_cache, metadata.slot_mapping)
        return reference.paged_attention(
            query,
            kv_cache,
            metadata.block_tables,
            metadata.query_start_loc,
            metadata.seq_lens,
            self.scale,
            self.sliding_window,
            self.logits_soft_cap,
        )


class ReferenceAttentionBackend(AttentionBackend):
    """Loops over sequences in Python: slow, obviously right, usable everywhere."""

    name = "reference"

    @classmethod
    def get_impl_cls(cls) -> type[AttentionImpl]:
        return ReferenceAttentionImpl
