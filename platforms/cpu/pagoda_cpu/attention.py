"""The CPU attention backend: paged KV cache, pagoda-cpu's native decode kernel, PyTorch
SDPA per sequence for prefills."""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from pagoda.attention import (
    FP8_KV_CACHE_DTYPE,
    AttentionBackend,
    AttentionImpl,
    AttentionMetadata,
    AttentionMetadataBuilder,
)
from pagoda_cpu.csrc import native
from pagoda_cpu.paged_attention import (
    QueryRows,
    decode_step,
    native_takes_cache,
    paged_attention,
    write_kv_cache,
)


@dataclass
class CpuAttentionMetadata(AttentionMetadata):
    query_rows: QueryRows | None = None
    """A step of a few query tokens a sequence: each token as a decode (`QueryRows`)."""


class CpuMetadataBuilder(AttentionMetadataBuilder):
    def build(self, common: AttentionMetadata) -> CpuAttentionMetadata:
        shared = {f.name: getattr(common, f.name) for f in fields(AttentionMetadata)}
        # Only where the native kernel will take the step's rows (not for an fp8 cache).
        takes = native() is not None and native_takes_cache(self.spec.dtype, self.spec.head_size)
        rows = QueryRows.of(common) if takes else None
        return CpuAttentionMetadata(**shared, query_rows=rows)


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
            rows = metadata.query_rows if isinstance(metadata, CpuAttentionMetadata) else None
            out = decode_step(query, key, value, kv_cache, metadata, self.scale,
                              self.sliding_window, self.logits_soft_cap, rows)
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

    @classmethod
    def get_builder_cls(cls) -> type[AttentionMetadataBuilder]:
        return CpuMetadataBuilder
