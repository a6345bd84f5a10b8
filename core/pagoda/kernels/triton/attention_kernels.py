"""Paged attention kernels for mixed batches (prefill, prefill chunks and decodes at once).

`_attention_kernel`: one program per (tile of BLOCK_Q query tokens of one sequence, kv head,
kv split). Its BLOCK_M rows are the tile's tokens times the query heads sharing that kv head
(GQA), so each key/value tile is loaded once for the whole group. A step of one query token
a sequence (ONE_QUERY: decodes) gives program 0 its sequence directly; otherwise each
program finds the sequence of its tile by a binary search over the query starts. Keys are
visited in tiles of TILE_N positions gathered through the block table (any cache block
size), with an online softmax in float32. Without splits it writes the output; with
NUM_SPLITS > 1 each split covers an equal share of its sequence's keys (in whole tiles,
from the sequence's own length: a graph captured for long contexts still spreads a short
one over its programs) and writes an unnormalised partial result that
`_reduce_splits_kernel` combines (decodes of few sequences).

An fp8 cache (KV_FP8) is converted exactly to the dot's operand type as it is loaded; its
scales, read from `kv_scales` on the device, are applied in float32 to what the dots give:
the key scale with the softmax scale to the scores, the value scale to the accumulator.
"""

from __future__ import annotations

import triton
import triton.language as tl

from pagoda.kernels.triton.common import wait_for_prior_kernels

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _find_sequence(query_start_loc_ptr, num_seqs, tile, BLOCK_Q: tl.constexpr):
    """The sequence owning `tile`: tiles of sequence b start at query_start_loc[b] // BLOCK_Q
    + b, which leaves each sequence enough tiles and strictly increases with b."""
    lo = tl.zeros((), dtype=tl.int32)
    hi = lo + num_seqs - 1  # a tensor even if num_seqs were specialised to a constant
    while lo < hi:
        mid = (lo + hi + 1) // 2
        first = tl.load(query_start_loc_ptr + mid).to(tl.int32) // BLOCK_Q + mid
        if first <= tile:
            lo = mid
        else:
            hi = mid - 1
    return lo


# num_seqs and the block table's width (its row stride) change from step to step: left
# unspecialised, one compiled variant serves all steps (by default Triton compiles
# separately for values == 1 and multiples of 16).
@triton.jit(do_not_specialize=["num_seqs", "stride_table"])
def _attention_kernel(
    out_ptr, part_acc_ptr, part_max_ptr, part_sum_ptr,
    q_ptr, key_cache_ptr, value_cache_ptr, kv_scales_ptr,
    block_tables_ptr, query_start_loc_ptr, seq_lens_ptr,
    scale, soft_cap, window, num_seqs,
    stride_qt, stride_qh, stride_ot, stride_oh,
    stride_cb, stride_cs, stride_ch, stride_table,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, BLOCK_Q: tl.constexpr,
    BLOCK_M: tl.constexpr, HEAD_SIZE: tl.constexpr, HEAD_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr, USE_WINDOW: tl.constexpr,
    USE_SOFT_CAP: tl.constexpr, NUM_SPLITS: tl.constexpr, DOT_DTYPE: tl.constexpr,
    KV_FP8: tl.constexpr, ONE_QUERY: tl.constexpr, PDL: tl.constexpr,
):
    wait_for_prior_kernels(PDL)
    tile = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    # ONE_QUERY: a program per sequence, each of at most one query token.
    seq = tile if ONE_QUERY else _find_sequence(query_start_loc_ptr, num_seqs, tile, BLOCK_Q)
    q_start = tl.load(query_start_loc_ptr + seq).to(tl.int32)
    q_len = tl.load(query_start_loc_ptr + seq + 1).to(tl.int32) - q_start
    q_block = 0 if ONE_QUERY else tile - (q_start // BLOCK_Q + seq)
    if q_block * BLOCK_Q >= q_len:
        return
    context = tl.load(seq_lens_ptr + seq).to(tl.int32) - q_len
    qk_scale = scale
    if KV_FP8:  # cached = stored * scale: the key scale joins the softmax scale
        qk_scale = scale * tl.load(kv_scales_ptr)

    # Rows: token (q_block * BLOCK_Q + m // GROUP_PAD), head (kv_head * GROUP + m % GROUP_PAD).
    m = tl.arange(0, BLOCK_M)
    tok = q_block * BLOCK_Q + m // GROUP_PAD
    head = kv_head * GROUP + m % GROUP_PAD
    row_ok = (tok < q_len) & (m % GROUP_PAD < GROUP)
    dims = tl.arange(0, HEAD_PAD)
    dim_ok = dims < HEAD_SIZE
    token = (q_start + tok).to(tl.int64)
    q = tl.load(q_ptr + token[:, None] * stride_qt + head[:, None] * stride_qh + dims[None, :],
                mask=row_ok[:, None] & dim_ok[None, :], other=0.0).to(DOT_DTYPE)
    q_pos = context + tok

    # Key positions this tile may see: [lo, hi).
    hi = context + tl.minimum(q_len, (q_block + 1) * BLOCK_Q)
    lo = tl.zeros((), dtype=tl.int32)
    if USE_WINDOW:
        lo = tl.maximum(context + q_block * BLOCK_Q - window + 1, 0)
    if NUM_SPLITS > 1:
        split_len = tl.cdiv(tl.cdiv(context + q_len, NUM_SPLITS), TILE_N) * TILE_N
        lo = tl.maximum(lo, split * split_len)
        hi = tl.minimum(hi, (split + 1) * split_len)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_PAD], dtype=tl.float32)
    table = block_tables_ptr + seq.to(tl.int64) * stride_table
    for start in range((lo // TILE_N) * TILE_N, hi, TILE_N):
        pos = start + tl.arange(0, TILE_N)
        pos_ok = (pos >= lo) & (pos < hi)
        block = tl.load(table + pos // BLOCK_SIZE, mask=pos_ok, other=0).to(tl.int64)
        slot = block * stride_cb + (pos % BLOCK_SIZE) * stride_cs + kv_head * stride_ch
        k = tl.load(key_cache_ptr + slot[None, :] + dims[:, None],
                    mask=pos_ok[None, :] & dim_ok[:, None], other=0.0)
        s = tl.dot(q, k.to(DOT_DTYPE), input_precision="ieee") * qk_scale
        if USE_SOFT_CAP:  # cap * tanh(s / cap), tanh(x) = 1 - 2 / (exp(2x) + 1)
            s = soft_cap * (1.0 - 2.0 / (tl.exp(2.0 * s / soft_cap) + 1.0))
        visible = pos_ok[None, :] & (pos[None, :] <= q_pos[:, None])
        if USE_WINDOW:
            visible = visible & (pos[None, :] > q_pos[:, None] - window)
        s = tl.where(visible, s * LOG2E, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that saw nothing yet
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(value_cache_ptr + slot[:, None] + dims[None, :],
                    mask=pos_ok[:, None] & dim_ok[None, :], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(DOT_DTYPE), v.to(DOT_DTYPE),
                                            input_precision="ieee")
        m_i = m_new
    if KV_FP8:
        acc = acc * tl.load(kv_scales_ptr + 1)

    if NUM_SPLITS > 1:
        # Partial results [T, H, NUM_SPLITS] (max in log2 units, sum) and [.., HEAD_PAD].
        part = (token * (tl.num_programs(1) * GROUP) + head) * NUM_SPLITS + split
        tl.store(part_max_ptr + part, m_i, mask=row_ok)
        tl.store(part_sum_ptr + part, l_i, mask=row_ok)
        tl.store(part_acc_ptr + part[:, None] * HEAD_PAD + dims[None, :], acc,
                 mask=row_ok[:, None])
    else:
        out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
        tl.store(out_ptr + token[:, None] * stride_ot + head[:, None] * stride_oh + dims[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & dim_ok[None, :])


@triton.jit(do_not_specialize=["num_seqs"])
def _reduce_splits_kernel(
    out_ptr, part_acc_ptr, part_max_ptr, part_sum_ptr, query_start_loc_ptr, num_seqs,
    stride_ot, stride_oh,
    NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr, HEAD_SIZE: tl.constexpr,
    HEAD_PAD: tl.constexpr, PDL: tl.constexpr,
):
    """Combine one (token, head)'s partial softmax results over the kv splits."""
    wait_for_prior_kernels(PDL)
    token = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1).to(tl.int64)
    if token >= tl.load(query_start_loc_ptr + num_seqs):
        return  # a padding token: no program wrote its partials
    splits = tl.arange(0, SPLITS_PAD)
    split_ok = splits < NUM_SPLITS
    dims = tl.arange(0, HEAD_PAD)
    part = (token * tl.num_programs(1) + head) * NUM_SPLITS + splits
    m = tl.load(part_max_ptr + part, mask=split_ok, other=float("-inf"))
    m_max = tl.max(m, axis=0)
    weight = tl.exp2(m - tl.where(m_max == float("-inf"), 0.0, m_max))
    total = tl.sum(tl.load(part_sum_ptr + part, mask=split_ok, other=0.0) * weight, axis=0)
    acc = tl.load(part_acc_ptr + part[:, None] * HEAD_PAD + dims[None, :],
                  mask=split_ok[:, None], other=0.0)
    out = tl.sum(acc * weight[:, None], axis=0) / tl.where(total == 0.0, 1.0, total)
    tl.store(out_ptr + token * stride_ot + head * stride_oh + dims,
             out.to(out_ptr.dtype.element_ty), mask=dims < HEAD_SIZE)
