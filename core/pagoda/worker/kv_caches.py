"""A model's paged KV cache tensors, one per attention layer."""

from __future__ import annotations

import torch

from pagoda.attention.backend import AttentionBackend, KVCacheSpec


def allocate_kv_caches(attn_backend: type[AttentionBackend], kv_spec: KVCacheSpec,
                       num_blocks: int, num_layers: int, device: torch.device
                       ) -> list[torch.Tensor]:
    """`num_layers` caches of `num_blocks` blocks in the backend's layout. Uninitialised
    unless the backend says otherwise: most never read slots outside a sequence (and an
    untouched host allocation costs no memory until written)."""
    shape = attn_backend.kv_cache_shape(kv_spec, num_blocks)
    alloc = torch.zeros if attn_backend.needs_zeroed_cache else torch.empty
    return [alloc(shape, dtype=kv_spec.dtype, device=device) for _ in range(num_layers)]
