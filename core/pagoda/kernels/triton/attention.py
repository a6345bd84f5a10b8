"""Paged attention over the [2, blocks, block_size, K, D] cache: launch and split planning.

`paged_attention` has the reference's arguments (`pagoda.attention.reference`) plus
what a backend knows on the host (the step's longest query) and explicit tile and split
choices; the "triton" attention backend plans them (`num_kv_splits`).
"""

from __future__ import annotations

import torch
import triton

from pagoda.attention.backend import FP8_KV_CACHE_DTYPE
from pagoda.kernels.triton.attention_kernels import _attention_kernel, _reduce_splits_kernel
from pagoda.kernels.triton.common import dot_dtype, parallel_units, pow2, unit_last_stride
from pagoda.kernels.triton.launch import DEFAULT_LAUNCH, LaunchParams, TritonLaunch

TILE_N = 64
"""Key positions per inner-loop tile (gathered across cache blocks of any size)."""

PREFILL_BLOCK_M = 64
"""Query rows (tokens x heads of one kv head) per program when queries are long."""

DOT_MIN = 16
"""tl.dot needs at least 16 along every dimension on GPUs."""

MAX_SPLITS = 16

MAX_SPLIT_QUERY = 16
"""The longest query whose keys are split: decodes, and the verify steps of speculative
decoding (1 + k tokens a sequence), whose few programs would otherwise each walk a whole
context; longer queries (prefills) make programs enough of their own."""


def num_kv_splits(num_seqs: int, num_kv_heads: int, max_query_len: int, max_kv_len: int,
                  device: torch.device) -> int:
    """How many key ranges to attend in parallel: more than one only for decode-sized
    queries (up to `MAX_SPLIT_QUERY` tokens) whose (sequence, kv head) programs would leave
    the device's units idle; at most one a key tile of the longest sequence
    (`max_kv_len`)."""
    units = parallel_units(device)
    if max_query_len > MAX_SPLIT_QUERY or units == 1:
        return 1
    programs = num_seqs * num_kv_heads
    target = 2 * units
    if programs >= target:
        return 1
    return max(1, min(triton.cdiv(target, programs), triton.cdiv(max_kv_len, TILE_N), MAX_SPLITS))


def attention_params(launch: TritonLaunch, fp8: bool, one_query: bool,
                     num_splits: int) -> LaunchParams:
    """The attention kernel's launch: `launch.fp8_decode_attention` where it is set and the
    step attends one query token a sequence over an fp8 cache, unsplit; else
    `launch.attention`."""
    if fp8 and one_query and num_splits == 1 and launch.fp8_decode_attention is not None:
        return launch.fp8_decode_attention
    return launch.attention


def paged_attention(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    logits_soft_cap: float | None = None,
    kv_scales: torch.Tensor | None = None,
    *,
    max_query_len: int | None = None,
    num_splits: int = 1,
    tile_n: int = TILE_N,
    launch: TritonLaunch = DEFAULT_LAUNCH,
) -> torch.Tensor:
    """`pagoda.attention.reference.paged_attention` with the host's knowledge and explicit
    choices: `max_query_len` (None: unknown) sizes the query tiles; `num_splits` > 1 splits
    every sequence's keys into that many equal ranges of whole tiles, reduced by a second
    kernel; `tile_n` keys per inner step; `launch` the platform's launch parameters."""
    num_tokens, num_heads, head_size = query.shape
    _, _, block_size, num_kv_heads, _ = kv_cache.shape
    num_seqs = seq_lens.shape[0]
    out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
    if num_tokens == 0 or num_seqs == 0:
        return out
    query = unit_last_stride(query)
    key_cache, value_cache = kv_cache[0], kv_cache[1]
    assert key_cache.stride(-1) == 1 and key_cache.stride() == value_cache.stride()
    fp8 = kv_cache.dtype == FP8_KV_CACHE_DTYPE
    assert kv_scales is not None or not fp8, "an fp8 KV cache needs kv_scales"
    group = num_heads // num_kv_heads
    group_pad = pow2(group)
    block_m = max(DOT_MIN if max_query_len == 1 else PREFILL_BLOCK_M, group_pad)
    block_q = block_m // group_pad
    head_pad = pow2(head_size, DOT_MIN)
    tile_n = max(tile_n, DOT_MIN)
    parts = _partials(num_tokens, num_heads, num_splits, head_pad, query.device)
    one_query = max_query_len == 1
    grid = (num_seqs if one_query else num_tokens // block_q + num_seqs, num_kv_heads,
            num_splits)
    params = attention_params(launch, fp8, one_query, num_splits)
    _attention_kernel[grid](
        out, *parts, query, key_cache, value_cache,
        kv_scales if fp8 else seq_lens,  # not read without KV_FP8
        block_tables, query_start_loc, seq_lens,
        scale, logits_soft_cap or 0.0, sliding_window or 0, num_seqs,
        query.stride(0), query.stride(1), out.stride(0), out.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2), block_tables.stride(0),
        GROUP=group, GROUP_PAD=group_pad, BLOCK_Q=block_q, BLOCK_M=block_m,
        HEAD_SIZE=head_size, HEAD_PAD=head_pad, BLOCK_SIZE=block_size, TILE_N=tile_n,
        USE_WINDOW=sliding_window is not None, USE_SOFT_CAP=logits_soft_cap is not None,
        NUM_SPLITS=num_splits, DOT_DTYPE=dot_dtype(query.dtype, _attention_kernel),
        KV_FP8=fp8, ONE_QUERY=one_query, **params.kwargs(),
        **launch.dependency("attention"),
    )
    if num_splits > 1:
        _reduce_splits_kernel[(num_tokens, num_heads)](
            out, *parts, query_start_loc, num_seqs, out.stride(0), out.stride(1),
            NUM_SPLITS=num_splits, SPLITS_PAD=pow2(num_splits), HEAD_SIZE=head_size,
            HEAD_PAD=head_pad, **launch.reduce.kwargs(), **launch.dependency("reduce"),
        )
    return out


def _partials(num_tokens: int, num_heads: int, num_splits: int, head_pad: int,
              device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Scratch for split results: accumulators [T, H, S, D'], running max and sum [T, H, S]
    (one element each when there are no splits: the kernel does not touch them)."""
    if num_splits == 1:
        empty = torch.empty(1, dtype=torch.float32, device=device)
        return empty, empty, empty
    shape = (num_tokens, num_heads, num_splits)
    return (torch.empty((*shape, head_pad), dtype=torch.float32, device=device),
            torch.empty(shape, dtype=torch.float32, device=device),
            torch.empty(shape, dtype=torch.float32, device=device))
