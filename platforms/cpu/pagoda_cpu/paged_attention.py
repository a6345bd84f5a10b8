"""Paged attention on the CPU: the "cpu_sdpa" backend's kernels.

Decodes (one query token) of a step run in one call of pagoda-cpu's native kernel
(`pagoda_cpu.csrc`: float32 and bfloat16 caches, head sizes a multiple of 16 up to 256),
else as one gather and two matmuls with GQA grouping (no head expansion); prefills and
prefill chunks go one sequence at a time through PyTorch's flash SDPA kernel, which is
compute-bound anyway. A step of decodes only, where the native kernel takes it, is one
call per layer: the cache write and the attention (`decode_step`). So is a step whose
sequences each have a few query tokens (a speculative verify step: 1 + k a sequence): each
query token is then a decode of its own sequence's prefix up to it (`QueryRows`, made once
a step by the backend's metadata builder).

An fp8 cache is written through a uint8 view (PyTorch's CPU index_copy takes no float8)
and dequantized into the query's dtype as it is gathered.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from pagoda.attention.backend import FP8_KV_CACHE_DTYPE, AttentionMetadata
from pagoda.attention.reference import quantize_fp8
from pagoda_cpu.csrc import native

MAX_ROWS_PER_SEQUENCE = 16
"""Longest query a sequence may have for its tokens to be attended to as decodes (each one
reads its sequence's keys and values again: for a few tokens over a context that is far
cheaper than a gather and SDPA per sequence; a long prefill is SDPA's)."""


@dataclass(frozen=True)
class QueryRows:
    """Each query token of a step as a decode of its own: its sequence's block table row
    and its length up to and including the token (0 for a padding token: zeros out)."""

    block_tables: torch.Tensor  # [T, max_blocks] int32
    seq_lens: torch.Tensor  # [T] int32

    @classmethod
    def of(cls, metadata: AttentionMetadata) -> QueryRows | None:
        """The rows of a step whose queries are 2 to `MAX_ROWS_PER_SEQUENCE` tokens a
        sequence at most, else None (a decode-only step needs none: a row a sequence)."""
        starts = metadata.query_start_loc_cpu
        if not 1 < metadata.max_query_len <= MAX_ROWS_PER_SEQUENCE:
            return None
        lengths, sources = [], []
        for b, seq_len in enumerate(metadata.seq_lens_cpu):
            q_len = starts[b + 1] - starts[b]
            lengths += range(seq_len - q_len + 1, seq_len + 1)
            sources += [b] * q_len
        padding = metadata.num_tokens - len(lengths)
        table = metadata.block_tables.index_select(
            0, torch.tensor(sources + [0] * padding, dtype=torch.int64))
        return cls(table, torch.tensor(lengths + [0] * padding, dtype=torch.int32))


def decode_step(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor,
    metadata: AttentionMetadata, scale: float, sliding_window: int | None,
    logits_soft_cap: float | None, rows: QueryRows | None = None,
) -> torch.Tensor | None:
    """A step of one query token per sequence (or, given its `rows`, of a few a sequence)
    in one native call, which writes the step's keys and values (slot -1: skipped, others
    bounds-checked) and attends; None where the step or the dtypes are not that kernel's
    (the caller takes the general path). Per layer, this replaces the host check of the
    slot mapping, two index copies, the output's copy and the lengths' conversion."""
    kernels = native()
    if (kernels is None or not key.dtype == value.dtype == query.dtype
            or not _native_takes(query, kv_cache)):
        return None
    if metadata.max_query_len == 1 and metadata.num_tokens == metadata.num_seqs:
        tables, lens = metadata.block_tables, metadata.seq_lens
    elif rows is not None:
        tables, lens = rows.block_tables, rows.seq_lens
    else:
        return None
    return kernels.decode_attention(query, kv_cache, tables, lens, scale, sliding_window or 0,
                                    logits_soft_cap or 0.0, key, value, metadata.slot_mapping)


def native_takes_cache(dtype: torch.dtype, head_size: int) -> bool:
    """Whether the native decode kernel takes a cache of `dtype` and heads of `head_size`:
    float32 or bfloat16, a multiple of 16 up to 256."""
    return dtype in (torch.float32, torch.bfloat16) and head_size % 16 == 0 and head_size <= 256


def _native_takes(query: torch.Tensor, kv_cache: torch.Tensor) -> bool:
    """Whether the native decode kernel takes this query [B, H, D] and cache (the same
    dtype, one it takes)."""
    return query.dtype == kv_cache.dtype and native_takes_cache(query.dtype, query.shape[-1])


def write_kv_cache(
    key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
    kv_scales: torch.Tensor | None = None,
) -> None:
    """See `pagoda.attention.reference.write_kv_cache`: one index_copy per keys and values."""
    _, num_blocks, block_size, num_kv_heads, head_size = kv_cache.shape
    flat = kv_cache.view(2, num_blocks * block_size, num_kv_heads, head_size)
    if bool((slot_mapping < 0).any()):
        keep = slot_mapping >= 0
        key, value, slot_mapping = key[keep], value[keep], slot_mapping[keep]
    if kv_cache.dtype == FP8_KV_CACHE_DTYPE:
        assert kv_scales is not None, "an fp8 KV cache needs kv_scales"
        flat = flat.view(torch.uint8)
        key = quantize_fp8(key, kv_scales[0]).view(torch.uint8)
        value = quantize_fp8(value, kv_scales[1]).view(torch.uint8)
    else:
        key, value = key.to(kv_cache.dtype), value.to(kv_cache.dtype)
    flat[0].index_copy_(0, slot_mapping, key)
    flat[1].index_copy_(0, slot_mapping, value)


def paged_attention(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: list[int],
    seq_lens: list[int],
    scale: float,
    sliding_window: int | None = None,
    logits_soft_cap: float | None = None,
    kv_scales: torch.Tensor | None = None,
) -> torch.Tensor:
    """See `pagoda.attention.reference.paged_attention`; the offsets come as host lists."""
    if kv_cache.dtype == FP8_KV_CACHE_DTYPE:
        assert kv_scales is not None, "an fp8 KV cache needs kv_scales"
    else:
        kv_scales = None
    out = torch.empty_like(query)
    decodes, others = [], []
    for b in range(len(seq_lens)):
        q_len = query_start_loc[b + 1] - query_start_loc[b]
        if q_len == 1:
            decodes.append(b)
        elif q_len > 1:
            others.append(b)
    if decodes:
        lens = [seq_lens[b] for b in decodes]
        if len(decodes) == len(seq_lens):  # a pure decode step: row b is sequence b
            out[:] = _decode(query, kv_cache, block_tables, lens, scale, sliding_window,
                             logits_soft_cap, kv_scales)
        else:
            rows = [query_start_loc[b] for b in decodes]
            out[rows] = _decode(query[rows], kv_cache, block_tables[decodes], lens, scale,
                                sliding_window, logits_soft_cap, kv_scales)
    for b in others:
        start, end = query_start_loc[b], query_start_loc[b + 1]
        out[start:end] = _prefill(query[start:end], kv_cache, block_tables[b], seq_lens[b],
                                  scale, sliding_window, logits_soft_cap, kv_scales)
    return out


def _gather(
    kv_cache: torch.Tensor, tables: torch.Tensor, length: int, kv_scales: torch.Tensor | None,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values [B, S, K, D] of the first `length` slots along each block table, in
    `dtype` (an fp8 cache's stored * scale, computed in float32)."""
    block_size = kv_cache.shape[2]
    tables = tables[..., : -(-length // block_size)]
    flat = tables.reshape(-1).long()
    shape = (*tables.shape[:-1], tables.shape[-1] * block_size, *kv_cache.shape[3:])
    k = kv_cache[0].index_select(0, flat).view(shape)[..., :length, :, :]
    v = kv_cache[1].index_select(0, flat).view(shape)[..., :length, :, :]
    if kv_scales is not None:
        return (k.float() * kv_scales[0]).to(dtype), (v.float() * kv_scales[1]).to(dtype)
    return k.to(dtype), v.to(dtype)


def _decode(
    query: torch.Tensor,  # [B, H, D]
    kv_cache: torch.Tensor,
    tables: torch.Tensor,  # [B, blocks]
    seq_lens: list[int],
    scale: float,
    sliding_window: int | None,
    logits_soft_cap: float | None,
    kv_scales: torch.Tensor | None,
) -> torch.Tensor:
    """The native kernel where it takes the case, else `decode_matmuls`."""
    kernels = native()
    if kernels is not None and kv_scales is None and _native_takes(query, kv_cache):
        return kernels.decode_attention(query, kv_cache, tables, torch.tensor(seq_lens), scale,
                                        sliding_window or 0, logits_soft_cap or 0.0)
    return decode_matmuls(query, kv_cache, tables, seq_lens, scale, sliding_window,
                          logits_soft_cap, kv_scales)


def decode_matmuls(
    query: torch.Tensor,  # [B, H, D]
    kv_cache: torch.Tensor,
    tables: torch.Tensor,  # [B, blocks]
    seq_lens: list[int],
    scale: float,
    sliding_window: int | None,
    logits_soft_cap: float | None,
    kv_scales: torch.Tensor | None,
) -> torch.Tensor:
    """Decodes on PyTorch's ops: one gather, two matmuls with GQA grouping."""
    batch, num_heads, head_size = query.shape
    num_kv_heads = kv_cache.shape[3]
    group = num_heads // num_kv_heads
    longest = max(seq_lens)
    k, v = _gather(kv_cache, tables, longest, kv_scales, query.dtype)  # [B, S, K, D]
    q = query.view(batch, num_kv_heads, group, head_size)
    scores = _soft_capped(torch.matmul(q, k.permute(0, 2, 3, 1)).float() * scale,
                          logits_soft_cap)  # [B, K, G, S]
    lens = torch.tensor(seq_lens)[:, None]
    pos = torch.arange(longest)[None, :]
    hidden = pos >= lens
    if sliding_window is not None:
        hidden |= pos < lens - sliding_window
    scores.masked_fill_(hidden[:, None, None, :], float("-inf"))
    probs = scores.softmax(dim=-1).to(q.dtype)
    # Padding slots hold whatever the cache held (maybe NaN): 0 * NaN would leak through.
    v = v.masked_fill(hidden[:, :, None, None], 0)
    out = torch.matmul(probs, v.permute(0, 2, 1, 3))  # [B, K, G, D]
    return out.reshape(batch, num_heads, head_size)


def _prefill(
    query: torch.Tensor,  # [q, H, D]
    kv_cache: torch.Tensor,
    table: torch.Tensor,
    seq_len: int,
    scale: float,
    sliding_window: int | None,
    logits_soft_cap: float | None,
    kv_scales: torch.Tensor | None,
) -> torch.Tensor:
    """One sequence's chunk of `q` query tokens, the last of its `seq_len`. SDPA gets
    4-D [1, heads, tokens, D] inputs and the kv heads as they are (`enable_gqa`): PyTorch's
    CPU flash kernel takes only 4-D inputs (3-D ones fall back to its math path, ~6x slower
    for 512 tokens), masks included."""
    q_len, num_heads, _ = query.shape
    group = num_heads // kv_cache.shape[3]
    k, v = _gather(kv_cache, table, seq_len, kv_scales, query.dtype)  # [S, K, D]
    mask = None
    if sliding_window is not None or q_len != seq_len or logits_soft_cap is not None:
        q_pos = torch.arange(seq_len - q_len, seq_len)[:, None]
        k_pos = torch.arange(seq_len)[None, :]
        mask = k_pos <= q_pos
        if sliding_window is not None:
            mask &= k_pos > q_pos - sliding_window
    q, k, v = query.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # [heads, *, D]
    if logits_soft_cap is not None:  # SDPA cannot cap the scores: attend explicitly, in f32
        if group > 1:
            k, v = k.repeat_interleave(group, dim=0), v.repeat_interleave(group, dim=0)
        scores = _soft_capped(torch.matmul(q.float(), k.float().transpose(1, 2)) * scale,
                              logits_soft_cap)
        probs = scores.masked_fill_(~mask, float("-inf")).softmax(dim=-1)
        return torch.matmul(probs, v.float()).to(q.dtype).transpose(0, 1)
    out = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask,
                                         is_causal=mask is None, scale=scale,
                                         enable_gqa=group > 1)
    return out[0].transpose(0, 1)


def _soft_capped(scores: torch.Tensor, cap: float | None) -> torch.Tensor:
    """cap * tanh(scores / cap) (the scores themselves without a cap)."""
    return scores if cap is None else torch.tanh(scores / cap) * cap
