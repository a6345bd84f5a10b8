"""The "ipex" attention backend: IPEX's paged-attention kernels for Intel GPUs.

IPEX's varlen flash attention takes Pagoda's cache as is: `kv_cache[0]` and `kv_cache[1]`
are [blocks, block_size, kv_heads, head_size] tensors, the "flash" layout its
`reshape_and_cache_flash` writes. Mixed prefill and decode batches go through one call
with cumulative query and key lengths; the key lengths are built once per step.
The calls follow the IPEX 2.7/2.8 XPU API; they have not run in this project's tests.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from pagoda.attention.backend import (
    AttentionBackend,
    AttentionImpl,
    AttentionMetadata,
    AttentionMetadataBuilder,
)
from pagoda_xpu.ipex import ipex_unavailable_reason, paged_attention_ops


@dataclass
class IpexAttentionMetadata(AttentionMetadata):
    cu_seqlens_k: torch.Tensor  # [B + 1] int32: cumulative sequence (key) lengths


class IpexMetadataBuilder(AttentionMetadataBuilder):
    def build(self, common: AttentionMetadata) -> IpexAttentionMetadata:
        cu_seqlens_k = torch.nn.functional.pad(
            torch.cumsum(common.seq_lens, 0, dtype=torch.int32), (1, 0))
        shared = {f.name: getattr(common, f.name) for f in fields(AttentionMetadata)}
        return IpexAttentionMetadata(**shared, cu_seqlens_k=cu_seqlens_k)


def window_sizes(sliding_window: int | None) -> tuple[int, int]:
    """IPEX's (left, right) window: keys within `sliding_window` positions up to the query,
    i.e. sliding_window - 1 to its left; (-1, -1) for none."""
    return (-1, -1) if sliding_window is None else (sliding_window - 1, 0)


class IpexAttentionImpl(AttentionImpl):
    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: AttentionMetadata,
    ) -> torch.Tensor:
        assert isinstance(metadata, IpexAttentionMetadata)
        ops = paged_attention_ops()
        key_cache, value_cache = kv_cache[0], kv_cache[1]
        ops.reshape_and_cache_flash(key, value, key_cache, value_cache, metadata.slot_mapping)
        out = torch.empty_like(query)
        left, right = window_sizes(self.sliding_window)
        ops.flash_attn_varlen_func(
            out, query.contiguous(), key_cache, value_cache, metadata.query_start_loc,
            metadata.cu_seqlens_k, metadata.max_query_len, metadata.max_seq_len, self.scale,
            True, metadata.block_tables, None,
            softcap=self.logits_soft_cap or 0.0, window_size_left=left, window_size_right=right,
        )
        return out


class IpexAttentionBackend(AttentionBackend):
    name = "ipex"
    supported_dtypes = (torch.bfloat16, torch.float16)  # its flash kernels take no float32
    supported_kv_cache_dtypes = supported_dtypes  # no fp8 KV cache
    supported_head_sizes = (32, 64, 80, 96, 112, 128, 256)
    supports_graph_capture = False  # not known to be capturable in XPU (SYCL) graphs

    @classmethod
    def unavailable_reason(cls) -> str | None:
        return ipex_unavailable_reason()

    @classmethod
    def get_impl_cls(cls) -> type[AttentionImpl]:
        return IpexAttentionImpl

    @classmethod
    def get_builder_cls(cls) -> type[AttentionMetadataBuilder]:
        return IpexMetadataBuilder
