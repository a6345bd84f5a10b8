"""The "triton" attention backend: the shared Triton kernels over the paged KV cache.

Any platform with Triton may register it. Mixed batches go through one kernel launch; a
step of short queries only (decodes, speculative verify steps) with long contexts and few
sequences splits the keys of each sequence across programs (see `num_kv_splits`).
"""

from __future__ import annotations

import torch

from pagoda.attention.backend import (
    FP8_KV_CACHE_DTYPE,
    AttentionBackend,
    AttentionConfig,
    AttentionImpl,
    AttentionMetadata,
)
from pagoda.kernels.triton.attention import TILE_N, num_kv_splits, paged_attention
from pagoda.kernels.triton.kv_cache import write_kv_cache
from pagoda.kernels.triton.launch import DEFAULT_LAUNCH, TritonLaunch
from pagoda.kernels.triton_support import MAX_HEAD_SIZE


class TritonAttentionImpl(AttentionImpl):
    tile_n = TILE_N
    """Key positions per inner-loop tile."""

    def launch(self, device: torch.device) -> TritonLaunch:
        """Launch parameters on `device`; a platform's subclass may choose its own."""
        return DEFAULT_LAUNCH

    def num_splits(self, metadata: AttentionMetadata, device: torch.device) -> int:
        """Key ranges each sequence is split into (see `num_kv_splits`)."""
        return num_kv_splits(metadata.num_seqs, self.num_kv_heads, metadata.max_query_len,
                             metadata.max_seq_len, device)

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
        launch = self.launch(query.device)
        write_kv_cache(key, value, kv_cache, metadata.slot_mapping, kv_scales, launch=launch)
        return paged_attention(
            query, kv_cache, metadata.block_tables, metadata.query_start_loc,
            metadata.seq_lens, self.scale, self.sliding_window, self.logits_soft_cap,
            kv_scales, max_query_len=metadata.max_query_len,
            num_splits=self.num_splits(metadata, query.device), tile_n=self.tile_n,
            launch=launch,
        )


class TritonAttentionBackend(AttentionBackend):
    name = "triton"
    supported_dtypes = (torch.bfloat16, torch.float16, torch.float32)
    supported_kv_cache_dtypes = (torch.bfloat16, torch.float16, torch.float32,
                                 FP8_KV_CACHE_DTYPE)
    supports_graph_capture = True
    supports_multi_token_graphs = True

    @classmethod
    def validate(cls, config: AttentionConfig) -> list[str]:
        """Head sizes up to 256 (padded to a power of two inside the kernel); any block size
        (key tiles are gathered across cache blocks); an fp8 cache where Triton converts
        float8 e4m3 (see `fp8_unsupported_reason`)."""
        reasons = super().validate(config)
        if not 1 <= config.head_size <= MAX_HEAD_SIZE:
            reasons.append(f"head size {config.head_size} is outside 1..{MAX_HEAD_SIZE}")
        if config.kv_cache_dtype == FP8_KV_CACHE_DTYPE:
            reason = fp8_unsupported_reason()
            if reason:
                reasons.append(reason)
        return reasons

    @classmethod
    def get_impl_cls(cls) -> type[AttentionImpl]:
        return TritonAttentionImpl


def fp8_unsupported_reason() -> str | None:
    """Why this process's GPU cannot hold an fp8 cache in Triton, or None: Triton converts
    float8 e4m3 (its float8e4nv) on NVIDIA GPUs of compute capability 8.9 and up only."""
    if torch.version.cuda is None or not torch.cuda.is_available():
        return None  # another vendor's GPU, or the interpreter on the host
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) < (8, 9):
        return (f"an fp8 KV cache needs an NVIDIA GPU of compute capability 8.9 or later "
                f"(Triton's float8 e4m3), this one is {major}.{minor}")
    return None
