"""The attention layer: one AttentionImpl of the chosen backend over the paged KV cache."""

from __future__ import annotations

import torch
from torch import nn

from pagoda.attention import AttentionBackend, AttentionMetadata


class Attention(nn.Module):
    """Writes the step's keys/values into this layer's cache and attends over it."""

    def __init__(
        self,
        num_heads: int,
        head_size: int,
        num_kv_heads: int,
        *,
        attn_backend: type[AttentionBackend],
        scale: float | None = None,
        sliding_window: int | None = None,
        logits_soft_cap: float | None = None,
    ):
        super().__init__()
        self.num_heads = num_heads
        self.head_size = head_size
        self.num_kv_heads = num_kv_heads
        self.sliding_window = sliding_window
        self.impl = attn_backend.get_impl_cls()(
            num_heads,
            head_size,
            head_size**-0.5 if scale is None else scale,
            num_kv_heads,
            sliding_window,
            logits_soft_cap,
        )

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: AttentionMetadata,
    ) -> torch.Tensor:
        """query [T, H, D], key/value [T, K, D] -> [T, H * D]."""
        return self.impl.forward(query, key, value, kv_cache, metadata).flatten(1)
