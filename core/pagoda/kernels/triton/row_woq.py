"""woq_linear of one row (a single decode) with 4-bit codes: y = x W^T (+ b), W[n, k] =
code * s[n, g] + o[n, g] (`woq_gemm` has the packed layout), where streaming the packed
weight is the whole cost.

Half a byte a weight leaves about four instructions per weight at the H200's bandwidth;
the weight-only gemv spends about eight (a shift, a mask, an integer-to-float subtract,
the dequantizing FMA, the product's FMA, and shuffles that put codes back in K order).
Here a code becomes the mantissa of a float32 in 1.5 instructions: one shift brings two
nibbles of a word to bits 19..22 and 15..18, and one AND-OR with the bits of 1.0 makes
1 + code / 16 (or 1 + code / 256) of each. Its weight is then one FMA,
(1 + code / 16) * 16 s + (o - 16 s) (256 for the lower nibble), whose only rounding
beyond the reference's is that of o - 16 s (o - 256 s): a few float32 ulps of 8 s
(a few hundred for the lower nibble, still under 1e-5 of s). Codes stay in their words'
bit order: x is loaded at each nibble's input (`quant_prims`' bit-reversed order) rather
than the codes moved into K order. Words are tiled [rows, groups, words of a group], so
each group's scale and offset broadcast without reshapes. K splits across programs when
there are too few column tiles, as in `gemv.py`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.kernels.triton.common import GemvTiles, parallel_units
from pagoda.kernels.triton.gemv import SUM_BLOCK, _sum_splits_kernel, num_k_splits
from pagoda.kernels.triton.woq_gemm import PackedGroupWeight

ONE_BITS = tl.constexpr(0x3F800000)
"""The bits of float32 1.0."""
HIGH_NIBBLE = tl.constexpr(0x00780000)
"""Bits 19..22: the top four mantissa bits of a float32 (a code there is code / 16)."""
LOW_NIBBLE = tl.constexpr(0x00078000)
"""Bits 15..18 (a code there is code / 256)."""


def woq_row_ok(weight: PackedGroupWeight) -> bool:
    """Whether `woq_row_gemv` takes this weight: 4-bit codes, groups of whole words."""
    return weight.bits == 4 and weight.group_size % 8 == 0


def plan_woq_row(n: int, k: int, group: int, units: int, block_n: int = 16,
                 block_k: int = 1024) -> GemvTiles:
    """`block_n` weight rows of `block_k` inputs (whole groups) a step, K split when the
    column tiles leave multiprocessors idle."""
    block_k = max(group, min(block_k, triton.next_power_of_2(k)))
    return GemvTiles(block_n, block_k, num_k_splits(triton.cdiv(n, block_n), k, units))


@triton.jit
def _nibbles(t, sh, oh, sl, ol):
    """The weights of the nibbles at bits 19..22 and 15..18 of the shifted words t, given
    16 s, o - 16 s and 256 s, o - 256 s."""
    high = ((t & HIGH_NIBBLE) | ONE_BITS).to(tl.float32, bitcast=True)
    low = ((t & LOW_NIBBLE) | ONE_BITS).to(tl.float32, bitcast=True)
    return tl.fma(high, sh, oh), tl.fma(low, sl, ol)


@triton.jit
def _x_at(x_ptr, word, F: tl.constexpr, hi):
    """x at input 8 word + F (float32; 0 from word hi on)."""
    return tl.load(x_ptr + 8 * word + F, mask=word < hi, other=0.0).to(tl.float32)


@triton.jit
def _woq_row_kernel(
    out_ptr, part_ptr, x_ptr, w_ptr, s_ptr, o_ptr, bias_ptr, N, K, split_words, stride_ww,
    stride_sn, GROUP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    HAS_BIAS: tl.constexpr, NUM_SPLITS: tl.constexpr, STAGES: tl.constexpr,
):
    """Columns [BLOCK_N * program 0, +BLOCK_N) of x [1, K] W^T over the words of split
    `program 1` (the output, or float32 partial sums [NUM_SPLITS, 1, N])."""
    WPG: tl.constexpr = GROUP // 8  # words of a group
    GROUPS: tl.constexpr = BLOCK_K // GROUP
    split = tl.program_id(1)
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    nc = tl.minimum(n, N - 1)  # rows past N read row N - 1, never stored
    row2 = nc.to(tl.int64)[:, None]
    row = row2[:, :, None]
    g = tl.arange(0, GROUPS)[None, :]
    word_of = g[:, :, None] * WPG + tl.arange(0, WPG)[None, None, :]  # [1, GROUPS, WPG]
    lo = split * split_words
    hi = tl.minimum(lo + split_words, K // 8)
    acc = tl.zeros([BLOCK_N, GROUPS, WPG], dtype=tl.float32)
    for start in tl.range(lo, hi, BLOCK_K // 8, num_stages=STAGES):
        word = start + word_of
        words = tl.load(w_ptr + row * stride_ww + word, mask=word < hi, other=0)
        grp = start // WPG + g
        g_ok = grp < K // GROUP
        # [rows, groups] loads, broadcast along the words of a group once expanded
        s = tl.load(s_ptr + row2 * stride_sn + grp, mask=g_ok, other=0.0)
        o = tl.load(o_ptr + row2 * stride_sn + grp, mask=g_ok, other=0.0)
        s = s.to(tl.float32)[:, :, None]
        o = o.to(tl.float32)[:, :, None]
        sh = s * 16.0
        sl = s * 256.0
        oh = o - sh
        ol = o - sl
        # nibble p holds input 8 word + bitrev3(p); pairs (p + 1, p) shifted to 19..22, 15..18
        w7, w6 = _nibbles(words.to(tl.uint32, bitcast=True) >> 9, sh, oh, sl, ol)
        acc = tl.fma(w7, _x_at(x_ptr, word, 7, hi), acc)
        acc = tl.fma(w6, _x_at(x_ptr, word, 3, hi), acc)
        w5, w4 = _nibbles(words.to(tl.uint32, bitcast=True) >> 1, sh, oh, sl, ol)
        acc = tl.fma(w5, _x_at(x_ptr, word, 5, hi), acc)
        acc = tl.fma(w4, _x_at(x_ptr, word, 1, hi), acc)
        w3, w2 = _nibbles(words << 7, sh, oh, sl, ol)
        acc = tl.fma(w3, _x_at(x_ptr, word, 6, hi), acc)
        acc = tl.fma(w2, _x_at(x_ptr, word, 2, hi), acc)
        w1, w0 = _nibbles(words << 15, sh, oh, sl, ol)
        acc = tl.fma(w1, _x_at(x_ptr, word, 4, hi), acc)
        acc = tl.fma(w0, _x_at(x_ptr, word, 0, hi), acc)
    y = tl.sum(tl.sum(acc, axis=2), axis=1)
    if NUM_SPLITS == 1:
        if HAS_BIAS:
            y += tl.load(bias_ptr + nc).to(tl.float32)
        tl.store(out_ptr + n, y.to(out_ptr.dtype.element_ty), mask=n < N)
    else:
        tl.store(part_ptr + split * N + n, y, mask=n < N)


def woq_row_gemv(out2: torch.Tensor, x2: torch.Tensor, weight: PackedGroupWeight,
                 bias: torch.Tensor | None, plan: GemvTiles | None = None) -> torch.Tensor:
    """out2 [1, N] = woq_linear of x2 [1, K] with a 4-bit weight (`woq_row_ok`)."""
    k = x2.shape[1]
    n = weight.words.shape[0]
    group = weight.group_size
    plan = plan or plan_woq_row(n, k, group, parallel_units(x2.device))
    assert plan.block_k % group == 0, "the K tile is whole groups"
    split_len = triton.cdiv(triton.cdiv(k, plan.num_splits), plan.block_k) * plan.block_k
    splits = triton.cdiv(k, split_len)
    part = (torch.empty((splits, 1, n), dtype=torch.float32, device=x2.device)
            if splits > 1 else out2)
    b = bias if bias is not None else weight.scales  # a placeholder when unused
    _woq_row_kernel[(triton.cdiv(n, plan.block_n), splits)](
        out2, part, x2, weight.words, weight.scales, weight.offsets, b, n, k, split_len // 8,
        weight.words.stride(0), weight.scales.stride(0), GROUP=group, BLOCK_N=plan.block_n,
        BLOCK_K=plan.block_k, HAS_BIAS=bias is not None, NUM_SPLITS=splits,
        STAGES=plan.num_stages, num_warps=plan.num_warps, num_stages=plan.num_stages,
    )
    if splits > 1:
        blk = min(triton.next_power_of_2(n), SUM_BLOCK)
        _sum_splits_kernel[(1, triton.cdiv(n, blk))](
            out2, part, b, 1, n, out2.stride(0), HAS_BIAS=bias is not None,
            NUM_SPLITS=splits, BLOCK=blk)
    return out2
