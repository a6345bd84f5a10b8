"""Attention backends: the interface, the reference backend and selection."""

from pagoda.attention.backend import (
    FP8_KV_CACHE_DTYPE,
    AttentionBackend,
    AttentionConfig,
    AttentionImpl,
    AttentionMetadata,
    AttentionMetadataBuilder,
    KVCacheSpec,
)

__all__ = [
    "FP8_KV_CACHE_DTYPE",
    "AttentionBackend",
    "AttentionConfig",
    "AttentionImpl",
    "AttentionMetadata",
    "AttentionMetadataBuilder",
    "KVCacheSpec",
]
