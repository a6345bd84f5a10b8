"""Attention backends: the interface, the reference backend and selection."""

from pagoda.attention.backend import (
    AttentionBackend,
    AttentionConfig,
    AttentionImpl,
    AttentionMetadata,
    AttentionMetadataBuilder,
    KVCacheSpec,
)

__all__ = [
    "AttentionBackend",
    "AttentionConfig",
    "AttentionImpl",
    "AttentionMetadata",
    "AttentionMetadataBuilder",
    "KVCacheSpec",
]
