"""Grouping a mixture-of-experts layer's (token, choice) pairs by expert, for the grouped
matmuls of `pagoda.kernels.triton.moe`.

Pair p = t * K + k is token t's k-th choice, of expert ids[p] (-1: skipped). Each expert's
pairs get a run of rows, in pair order, padded to a multiple of BLOCK_M so that a block of
BLOCK_M rows belongs to one expert; the runs follow each other in expert order:

- `sorted_pairs[r]`: the pair at row r (rows past a run's real pairs hold anything);
- `expert_start[e]`: expert e's first row; `expert_count[e]`: its real pairs.

An expert's rank-within-run for a pair is the number of its pairs before it, so the layout
is deterministic. Up to `chunk_size` pairs take one program (a decode step); more take
three kernels: pairs per expert per chunk, a scan over the chunks, and the scatter. No
host synchronisation: the launches depend on the shapes alone.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.kernels.triton.common import pow2

ONE_HOT_ELEMENTS = 16384
"""Pairs x experts compared per program and step (a [pairs, experts] one-hot tile)."""
ALIGN_WARPS = 8


def chunk_size(num_experts: int) -> int:
    """Pairs one program compares with every expert at once."""
    return max(16, min(256, ONE_HOT_ELEMENTS // pow2(num_experts)))


def capacity(num_pairs: int, num_experts: int, block_m: int) -> int:
    """Rows of the padded layout: every pair, and under BLOCK_M of padding per expert that
    has pairs."""
    return num_pairs + min(num_pairs, num_experts) * (block_m - 1)


@triton.jit
def _one_hot(ids_ptr, first, N, E, CHUNK: tl.constexpr, E_PAD: tl.constexpr):
    """(pair indices [CHUNK], ids, one-hot int32 [CHUNK, E_PAD]) of pairs first.. (past N:
    id -1, all zeros)."""
    pair = first + tl.arange(0, CHUNK)
    ids = tl.load(ids_ptr + pair, mask=pair < N, other=-1).to(tl.int32)
    ids = tl.where(ids < E, ids, -1)
    hot = (ids[:, None] == tl.arange(0, E_PAD)[None, :]).to(tl.int32)
    return pair, ids, hot


@triton.jit
def _write_runs(start_ptr, count_ptr, counts, E, E_PAD: tl.constexpr, BLOCK_M: tl.constexpr):
    """Store each expert's pair count and first row (runs padded to BLOCK_M, in expert
    order); returns the first rows [E_PAD]."""
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    starts = tl.cumsum(padded, axis=0) - padded
    e = tl.arange(0, E_PAD)
    tl.store(start_ptr + e, starts, mask=e < E)
    tl.store(count_ptr + e, counts, mask=e < E)
    return starts


@triton.jit
def _scatter(sorted_ptr, pair, ids, hot, base):
    """sorted_pairs[base[e] + rank of the pair among the chunk's pairs of e] = pair, for
    each pair of the chunk with an expert e (base [E_PAD])."""
    rank = tl.sum(tl.cumsum(hot, axis=0) * hot, axis=1) - 1
    row = tl.sum(base[None, :] * hot, axis=1) + rank
    tl.store(sorted_ptr + row, pair, mask=ids >= 0)


# The pair and chunk counts change from step to step: left unspecialised (Triton would
# compile separately for values == 1 and multiples of 16). CHUNK and the scan's ROWS take
# a handful of powers of two, which decode graphs meet at capture.
@triton.jit(do_not_specialize=["N"])
def _align_one_kernel(ids_ptr, sorted_ptr, start_ptr, count_ptr, N, E,
                      CHUNK: tl.constexpr, E_PAD: tl.constexpr, BLOCK_M: tl.constexpr):
    """The whole layout, for up to CHUNK pairs, in one program."""
    pair, ids, hot = _one_hot(ids_ptr, 0, N, E, CHUNK, E_PAD)
    starts = _write_runs(start_ptr, count_ptr, tl.sum(hot, axis=0), E, E_PAD, BLOCK_M)
    _scatter(sorted_ptr, pair, ids, hot, starts)


@triton.jit(do_not_specialize=["N"])
def _align_count_kernel(ids_ptr, chunk_ptr, N, E, CHUNK: tl.constexpr, E_PAD: tl.constexpr):
    """Pairs per expert of chunk `program 0`, into row `program 0` of chunk [C, E_PAD]."""
    c = tl.program_id(0)
    _, _, hot = _one_hot(ids_ptr, c * CHUNK, N, E, CHUNK, E_PAD)
    tl.store(chunk_ptr + c * E_PAD + tl.arange(0, E_PAD), tl.sum(hot, axis=0))


@triton.jit(do_not_specialize=["C"])
def _align_scan_kernel(chunk_ptr, start_ptr, count_ptr, C, E, E_PAD: tl.constexpr,
                       ROWS: tl.constexpr, BLOCK_M: tl.constexpr):
    """Each chunk's row of chunk [C, E_PAD] becomes, per expert, its pairs in the chunks
    before; the experts' runs are written."""
    e = tl.arange(0, E_PAD)
    total = tl.zeros([E_PAD], dtype=tl.int32)
    for first in range(0, C, ROWS):
        c = first + tl.arange(0, ROWS)
        tile = chunk_ptr + c[:, None] * E_PAD + e[None, :]
        counts = tl.load(tile, mask=(c < C)[:, None], other=0)
        tl.store(tile, tl.cumsum(counts, axis=0) - counts + total[None, :], mask=(c < C)[:, None])
        total += tl.sum(counts, axis=0)
    _write_runs(start_ptr, count_ptr, total, E, E_PAD, BLOCK_M)


@triton.jit(do_not_specialize=["N"])
def _align_scatter_kernel(ids_ptr, sorted_ptr, chunk_ptr, start_ptr, N, E,
                          CHUNK: tl.constexpr, E_PAD: tl.constexpr):
    """The rows of chunk `program 0`'s pairs: its experts' runs' first rows plus the pairs
    of the chunks before (the scanned chunk [C, E_PAD])."""
    c = tl.program_id(0)
    e = tl.arange(0, E_PAD)
    pair, ids, hot = _one_hot(ids_ptr, c * CHUNK, N, E, CHUNK, E_PAD)
    base = tl.load(chunk_ptr + c * E_PAD + e) + tl.load(start_ptr + e, mask=e < E, other=0)
    _scatter(sorted_ptr, pair, ids, hot, base)


def align_pairs(topk_ids: torch.Tensor, num_experts: int,
                block_m: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sorted_pairs [capacity], expert_start [E], expert_count [E]), int32, of contiguous
    ids [T, K] (see the module docstring)."""
    n = topk_ids.numel()
    device = topk_ids.device
    e_pad = pow2(num_experts)
    chunk = chunk_size(num_experts)
    sorted_pairs = torch.empty(capacity(n, num_experts, block_m), dtype=torch.int32,
                               device=device)
    start = torch.empty(num_experts, dtype=torch.int32, device=device)
    count = torch.empty_like(start)
    if n <= chunk:
        _align_one_kernel[(1,)](topk_ids, sorted_pairs, start, count, n, num_experts,
                                CHUNK=pow2(n, 16), E_PAD=e_pad, BLOCK_M=block_m,
                                num_warps=ALIGN_WARPS)
        return sorted_pairs, start, count
    chunks = triton.cdiv(n, chunk)
    per_chunk = torch.empty((chunks, e_pad), dtype=torch.int32, device=device)
    _align_count_kernel[(chunks,)](topk_ids, per_chunk, n, num_experts, CHUNK=chunk,
                                   E_PAD=e_pad, num_warps=ALIGN_WARPS)
    _align_scan_kernel[(1,)](per_chunk, start, count, chunks, num_experts, E_PAD=e_pad,
                             ROWS=max(1, min(pow2(chunks), ONE_HOT_ELEMENTS // e_pad)),
                             BLOCK_M=block_m, num_warps=ALIGN_WARPS)
    _align_scatter_kernel[(chunks,)](topk_ids, sorted_pairs, per_chunk, start, n,
                                     num_experts, CHUNK=chunk, E_PAD=e_pad,
                                     num_warps=ALIGN_WARPS)
    return sorted_pairs, start, count
