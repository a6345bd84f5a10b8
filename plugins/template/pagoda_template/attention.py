"""The template attention backend: its own paged-attention kernel over the paged cache."""

from __future__ import annotations

from pagoda.attention import AttentionBackend, AttentionImpl
from pagoda_template import ops


class TemplateAttentionImpl(AttentionImpl):
    def forward(self, query, key, value, kv_cache, metadata):
        ops.reshape_and_cache(key, value, kv_cache, metadata.slot_mapping)
        return ops.paged_attention(query, kv_cache, metadata.block_tables,
                                   metadata.query_start_loc, metadata.seq_lens, self.scale,
                                   self.sliding_window, self.logits_soft_cap)


class TemplateAttentionBackend(AttentionBackend):
    name = "template"

    @classmethod
    def get_impl_cls(cls) -> type[AttentionImpl]:
        return TemplateAttentionImpl
