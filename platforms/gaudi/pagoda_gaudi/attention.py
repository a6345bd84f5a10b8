"""The "fused_sdpa" attention backend: Gaudi's FusedSDPA over the paged KV cache.

Each sequence's keys and values are gathered from its cache blocks, its query heads
grouped over the kv heads (repeated for FusedSDPA, which wants equal head counts), and
attended with a mask that is causal after the sequence's cached context (prefill chunks)
and, with a sliding window, bounded below. Sequence lengths come from the host copies in
the step metadata, so nothing waits on the device. This is the correct-first shape: one
FusedSDPA call per sequence, at the sequence's own length (no bucketing yet).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from pagoda.attention.backend import (
    AttentionBackend,
    AttentionImpl,
    AttentionMetadata,
)
from pagoda.attention.reference import write_kv_cache
from pagoda_gaudi.sdk import fused_sdpa, sdk_unavailable_reason

Sdpa = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, float],
                torch.Tensor]
"""(query [1, H, q, D], key [1, H, s, D], value, additive mask [q, s] or None, scale)."""


def attention_mask(q_len: int, seq_len: int, sliding_window: int | None, dtype: torch.dtype,
                   device: torch.device) -> torch.Tensor | None:
    """Additive mask [q_len, seq_len] for a sequence's last q_len tokens: 0 where a query
    sees a key, -inf elsewhere; None when every query sees every key (a plain decode)."""
    if q_len == 1 and (sliding_window is None or seq_len <= sliding_window):
        return None
    q_pos = torch.arange(seq_len - q_len, seq_len, device=device)[:, None]
    k_pos = torch.arange(seq_len, device=device)[None, :]
    hidden = k_pos > q_pos
    if sliding_window is not None:
        hidden |= k_pos <= q_pos - sliding_window
    return torch.zeros(hidden.shape, dtype=dtype, device=device).masked_fill(hidden, -torch.inf)


def paged_sdpa(query: torch.Tensor, kv_cache: torch.Tensor, block_tables: torch.Tensor,
               query_start_loc: list[int], seq_lens: list[int], scale: float,
               sliding_window: int | None, sdpa: Sdpa) -> torch.Tensor:
    """Attention of query [T, H, D] over the paged cache, one `sdpa` call per sequence."""
    out = torch.empty_like(query)
    num_heads, (block_size, num_kv_heads) = query.shape[1], kv_cache.shape[2:4]
    group = num_heads // num_kv_heads
    for seq, seq_len in enumerate(seq_lens):
        start, end = query_start_loc[seq], query_start_loc[seq + 1]
        if end == start:
            continue
        blocks = block_tables[seq, : -(-seq_len // block_size)].long()

        def heads_first(cache: torch.Tensor, blocks: torch.Tensor = blocks,
                        seq_len: int = seq_len) -> torch.Tensor:
            rows = cache[blocks].flatten(0, 1)[:seq_len]  # [S, K, D]
            return rows.repeat_interleave(group, dim=1).transpose(0, 1).unsqueeze(0)

        q = query[start:end].transpose(0, 1).unsqueeze(0)  # [1, H, q, D]
        mask = attention_mask(end - start, seq_len, sliding_window, query.dtype, query.device)
        attended = sdpa(q, heads_first(kv_cache[0]), heads_first(kv_cache[1]), mask, scale)
        out[start:end] = attended[0].transpose(0, 1).to(query.dtype)
    return out


def fused_sdpa_call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    """FusedSDPA.apply(q, k, v, mask, dropout, is_causal, scale, softmax_mode), exact softmax."""
    return fused_sdpa().apply(q, k, v, mask, 0.0, False, scale, "None")


class FusedSdpaAttentionImpl(AttentionImpl):
    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: AttentionMetadata,
    ) -> torch.Tensor:
        write_kv_cache(key, value, kv_cache, metadata.slot_mapping)
        return paged_sdpa(query, kv_cache, metadata.block_tables, metadata.query_start_loc_cpu,
                          metadata.seq_lens_cpu, self.scale, self.sliding_window,
                          fused_sdpa_call)


class FusedSdpaAttentionBackend(AttentionBackend):
    name = "fused_sdpa"
    supported_dtypes = (torch.bfloat16, torch.float32)
    supported_kv_cache_dtypes = supported_dtypes  # no fp8 KV cache
    supports_logits_soft_cap = False  # FusedSDPA has no soft-capping
    supports_graph_capture = False  # loops over the host's sequence lengths

    @classmethod
    def unavailable_reason(cls) -> str | None:
        return sdk_unavailable_reason()

    @classmethod
    def get_impl_cls(cls) -> type[AttentionImpl]:
        return FusedSdpaAttentionImpl
