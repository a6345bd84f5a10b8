"""The `fused_moe` op: a layer's routed experts as grouped matmuls over stacked weights.

1. `align_pairs` (`moe_align`) groups the (token, choice) pairs by expert into runs of
   rows padded to BLOCK_M, so that each block of rows has one expert.
2. `_moe_gate_up_kernel`: per block and BLOCK_N intermediate features, the block's tokens
   (gathered through the pairs) times the expert's gate and up rows of w13, then
   silu(gate) * up: `act` [rows, I] in the layout's row order.
3. `_moe_down_kernel`: act times the expert's w2, each row's result stored at its pair's
   row of `pair_out` [T * K, H].
4. `_moe_sum_kernel`: out[t] = sum over k of topk_weights[t, k] * pair_out[t * K + k],
   skipped choices left out, in float32.

Rounding follows the reference: gate, up and the expert's output are rounded to the model
dtype as `linear`'s outputs are, the activation is computed in float32. Tiles come from the
shape alone (`plan_moe`): small row blocks when experts get few tokens (decode steps: the
time is streaming the chosen experts' weights), large ones for prefill. Nothing is
synchronised with the host, so decode steps can be captured in device graphs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from pagoda.kernels.triton.common import dot_dtype, grouped_tile, pow2, unit_last_stride
from pagoda.kernels.triton.launch import DEFAULT_LAUNCH, TritonLaunch
from pagoda.kernels.triton.moe_align import align_pairs

SUM_BLOCK = 1024


@dataclass(frozen=True)
class GemmTiles:
    """One grouped matmul's launch: column and K tiles, warps, pipeline stages."""

    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 3


@dataclass(frozen=True)
class MoePlan:
    """How `fused_moe` launches its matmuls."""

    block_m: int
    """Rows of a block (one expert's): the alignment pads each expert's run to it."""
    gate_up: GemmTiles
    down: GemmTiles
    group_m: int = 8
    """Row blocks a column of programs walks before the next column (L2 reuse of an
    expert's weight tiles across its blocks)."""


def plan_moe(num_pairs: int, num_experts: int, itemsize: int = 2) -> MoePlan:
    """Tiles for `num_pairs` (token, choice) pairs over `num_experts` experts, by the pairs
    an expert gets on average: row blocks of 16 while that is about one block (decode: the
    chosen experts' weights stream once, narrow columns give every multiprocessor a
    program), up to 128 for prefill (tensor-core tiles). 4-byte elements take shorter K
    tiles or fewer stages, to stay in shared memory."""
    per_expert = num_pairs / num_experts
    half = itemsize <= 2
    if per_expert <= 16:
        k = 128 if half else 64
        return MoePlan(16, GemmTiles(32 if num_pairs <= 64 else 64, k, 4, 4),
                       GemmTiles(64, k, 4, 4), group_m=1)
    if per_expert <= 48:
        return MoePlan(32, GemmTiles(64, 64, 4, 4), GemmTiles(64, 64, 4, 4))
    stages = 3 if half else 2
    if per_expert <= 192:
        return MoePlan(64, GemmTiles(64, 64, 4, stages), GemmTiles(128, 64, 4, stages))
    return MoePlan(128, GemmTiles(64, 64, 8, stages), GemmTiles(128, 64, 8, stages))


@triton.jit
def _block_expert(start_ptr, count_ptr, row0, E, E_PAD: tl.constexpr, BLOCK_M: tl.constexpr):
    """(expert, its first row, its pair count) of the block of rows starting at row0; the
    expert is E when the block is past every run."""
    e = tl.arange(0, E_PAD)
    starts = tl.load(start_ptr + e, mask=e < E, other=2**30)
    counts = tl.load(count_ptr + e, mask=e < E, other=0)
    end = tl.sum((counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M, axis=0)
    expert = tl.sum((starts <= row0).to(tl.int32), axis=0) - 1
    expert = tl.where(row0 < end, expert, E)
    here = e == expert
    return expert, tl.sum(tl.where(here, starts, 0), axis=0), tl.sum(tl.where(here, counts, 0),
                                                                     axis=0)


# rows_total changes from step to step: left unspecialised (see moe_align).
@triton.jit(do_not_specialize=["rows_total"])
def _moe_gate_up_kernel(
    act_ptr, x_ptr, w_ptr, sorted_ptr, start_ptr, count_ptr, rows_total, INTER, H, E,
    stride_xm, stride_we, stride_wn, stride_am,
    TOP_K: tl.constexpr, E_PAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, DOT_DTYPE: tl.constexpr,
):
    """act[rows, n] = silu(x w_gate[n]) * (x w_up[n]) for one block of rows (one expert's)
    and BLOCK_N intermediate features n."""
    pid_m, pid_n = grouped_tile(tl.program_id(0), rows_total, INTER, BLOCK_M, BLOCK_N, GROUP_M)
    row0 = pid_m * BLOCK_M
    expert, first, count = _block_expert(start_ptr, count_ptr, row0, E, E_PAD, BLOCK_M)
    if expert >= E:
        return
    rows = row0 + tl.arange(0, BLOCK_M)
    real = rows - first < count
    tokens = tl.load(sorted_ptr + rows, mask=real, other=0) // TOP_K
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    nc = tl.minimum(n, INTER - 1)
    k = tl.arange(0, BLOCK_K)
    x_tile = x_ptr + tokens.to(tl.int64)[:, None] * stride_xm + k[None, :]
    gate_tile = (w_ptr + expert.to(tl.int64) * stride_we + nc.to(tl.int64)[:, None] * stride_wn
                 + k[None, :])
    up_tile = gate_tile + INTER * stride_wn
    gate = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    up = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(0, H, BLOCK_K):
        k_ok = (start + k < H)[None, :]
        x = tl.load(x_tile + start, mask=real[:, None] & k_ok, other=0.0).to(DOT_DTYPE)
        wg = tl.load(gate_tile + start, mask=k_ok, other=0.0).to(DOT_DTYPE)
        wu = tl.load(up_tile + start, mask=k_ok, other=0.0).to(DOT_DTYPE)
        gate = tl.dot(x, tl.trans(wg), gate, input_precision="ieee")
        up = tl.dot(x, tl.trans(wu), up, input_precision="ieee")
    out_ty = act_ptr.dtype.element_ty
    gate = gate.to(out_ty).to(tl.float32)
    up = up.to(out_ty).to(tl.float32)
    act = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(act_ptr + rows.to(tl.int64)[:, None] * stride_am + n[None, :], act.to(out_ty),
             mask=real[:, None] & (n < INTER)[None, :])


@triton.jit(do_not_specialize=["rows_total"])
def _moe_down_kernel(
    out_ptr, act_ptr, w_ptr, sorted_ptr, start_ptr, count_ptr, rows_total, H, INTER, E,
    stride_am, stride_we, stride_wn, stride_om,
    E_PAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, DOT_DTYPE: tl.constexpr,
):
    """pair_out[pair of row, n] = act[row] w2[n] for one block of rows and BLOCK_N hidden
    features n."""
    pid_m, pid_n = grouped_tile(tl.program_id(0), rows_total, H, BLOCK_M, BLOCK_N, GROUP_M)
    row0 = pid_m * BLOCK_M
    expert, first, count = _block_expert(start_ptr, count_ptr, row0, E, E_PAD, BLOCK_M)
    if expert >= E:
        return
    rows = row0 + tl.arange(0, BLOCK_M)
    real = rows - first < count
    pairs = tl.load(sorted_ptr + rows, mask=real, other=0)
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    nc = tl.minimum(n, H - 1)
    k = tl.arange(0, BLOCK_K)
    a_tile = act_ptr + rows.to(tl.int64)[:, None] * stride_am + k[None, :]
    w_tile = (w_ptr + expert.to(tl.int64) * stride_we + nc.to(tl.int64)[:, None] * stride_wn
              + k[None, :])
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(0, INTER, BLOCK_K):
        k_ok = (start + k < INTER)[None, :]
        a = tl.load(a_tile + start, mask=real[:, None] & k_ok, other=0.0).to(DOT_DTYPE)
        w = tl.load(w_tile + start, mask=k_ok, other=0.0).to(DOT_DTYPE)
        acc = tl.dot(a, tl.trans(w), acc, input_precision="ieee")
    tl.store(out_ptr + pairs.to(tl.int64)[:, None] * stride_om + n[None, :],
             acc.to(out_ptr.dtype.element_ty), mask=real[:, None] & (n < H)[None, :])


@triton.jit
def _moe_sum_kernel(out_ptr, pair_ptr, weights_ptr, ids_ptr, H, stride_om, stride_pm,
                    TOP_K: tl.constexpr, BLOCK: tl.constexpr):
    """out[t, block of h] = sum over k of weight * pair_out[t K + k] (skipped k: nothing)."""
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for k in tl.static_range(TOP_K):
        pair = t * TOP_K + k
        chosen = tl.load(ids_ptr + pair) >= 0
        weight = tl.where(chosen, tl.load(weights_ptr + pair), 0.0)
        width = tl.where(chosen, H, 0)  # a skipped pair's row was never written
        y = tl.load(pair_ptr + pair * stride_pm + h, mask=h < width, other=0.0)
        acc += weight * y.to(tl.float32)
    tl.store(out_ptr + t * stride_om + h, acc.to(out_ptr.dtype.element_ty), mask=h < H)


def fused_moe(hidden: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
              topk_weights: torch.Tensor, topk_ids: torch.Tensor, *,
              launch: TritonLaunch = DEFAULT_LAUNCH, plan: MoePlan | None = None
              ) -> torch.Tensor:
    """See `pagoda.ops.reference.fused_moe`. `launch.elementwise` launches the final sum
    (a row kernel); the grouped matmuls take `plan`'s tiles (by default `plan_moe`'s)."""
    tokens, hidden_size = hidden.shape
    experts, inter = w2.shape[0], w2.shape[2]
    top_k = topk_ids.shape[1]
    out = torch.empty_like(hidden)
    if tokens == 0:
        return out
    x = unit_last_stride(hidden)
    ids, weights = topk_ids.contiguous(), topk_weights.contiguous()
    plan = plan or plan_moe(tokens * top_k, experts, hidden.element_size())
    sorted_pairs, start, count = align_pairs(ids, experts, plan.block_m)
    rows_total = sorted_pairs.numel()
    blocks = triton.cdiv(rows_total, plan.block_m)
    act = torch.empty((rows_total, inter), dtype=hidden.dtype, device=hidden.device)
    pair_out = torch.empty((tokens * top_k, hidden_size), dtype=hidden.dtype,
                           device=hidden.device)
    e_pad = pow2(experts)
    dot = dot_dtype(hidden.dtype, _moe_gate_up_kernel)
    tiles = plan.gate_up
    _moe_gate_up_kernel[(blocks * triton.cdiv(inter, tiles.block_n),)](
        act, x, w13, sorted_pairs, start, count, rows_total, inter, hidden_size, experts,
        x.stride(0), w13.stride(0), w13.stride(1), act.stride(0),
        TOP_K=top_k, E_PAD=e_pad, BLOCK_M=plan.block_m, BLOCK_N=tiles.block_n,
        BLOCK_K=tiles.block_k, GROUP_M=plan.group_m, DOT_DTYPE=dot,
        num_warps=tiles.num_warps, num_stages=tiles.num_stages,
    )
    tiles = plan.down
    _moe_down_kernel[(blocks * triton.cdiv(hidden_size, tiles.block_n),)](
        pair_out, act, w2, sorted_pairs, start, count, rows_total, hidden_size, inter,
        experts, act.stride(0), w2.stride(0), w2.stride(1), pair_out.stride(0),
        E_PAD=e_pad, BLOCK_M=plan.block_m, BLOCK_N=tiles.block_n, BLOCK_K=tiles.block_k,
        GROUP_M=plan.group_m, DOT_DTYPE=dot, num_warps=tiles.num_warps,
        num_stages=tiles.num_stages,
    )
    block = min(pow2(hidden_size), SUM_BLOCK)
    _moe_sum_kernel[(tokens, triton.cdiv(hidden_size, block))](
        out, pair_out, weights, ids, hidden_size, out.stride(0), pair_out.stride(0),
        TOP_K=top_k, BLOCK=block, **launch.elementwise.kwargs(),
    )
    return out
