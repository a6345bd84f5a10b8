"""fp8_linear of one row (a single decode) with per-row weight scales: y = x W^T (+ b),
where streaming the float8 e4m3 weight is the whole cost.

At the H200's bandwidth a multiprocessor must consume about 16 weight bytes a cycle, which
leaves about 8 instructions a weight: the general gemv (`scaled_gemm._qgemv_kernel`)
spends more on converting codes one by one. Here each 32-bit word of four codes is loaded
once (16-byte loads: offsets and strides count words, so their alignment is known) and
its codes become float32 by two packed PTX conversions, e4m3x2 -> f16x2 (exact), and four
f16 -> f32; x is rounded to e4m3 values as the reference does with one packed
conversion there (round to nearest even, saturating at 448) and one back, two values at
a time. Products accumulate in float32 per (weight row, word) lane and are summed over K
once, at the end: about 3.3 instructions a weight instead of 6.2 for the bit moves below
(counted in the sm_90 SASS of the loop). x is loaded once per byte position of the words,
so no register shuffling puts codes back into K order. The per-token scale is a first
pass over x, all of a 4096-wide x in one load. K splits across programs when there are
too few column tiles, as in `gemv.py`.

Triton's interpreter (CI on CPUs) runs no inline PTX: there codes become float32 by
moving their bits into place (the sign to bit 31, the 7 exponent-and-mantissa bits to
bits 20..26, which reads as the code's value times 2**-120 exactly, subnormals included),
and x is rounded in float arithmetic (`round_fp8`) and taken times 2**64 so that no
product is subnormal; the sum is multiplied back by 2**56.

On an H200 (ci/bench_quant_kernels.py --rows 1 --ops fp8, 8B shapes, one run) qkv, o,
gate_up and down take 10.3 / 8.3 / 33.3 / 19.7 µs against 12.8 / 10.2 / 43.3 / 24.8 for
the bit moves with 4-byte loads: a step's FP8 matmuls 2.29 ms instead of 2.92. Asking
L2 for the first K steps' lines before the amax pass, or a fourth pipeline stage, made
every shape slower (docs/benchmarks.md, issue 14).
"""


from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.kernels.triton.common import (
    GemvTiles,
    interpreted,
    parallel_units,
    pow2,
    wait_for_prior_kernels,
)
from pagoda.kernels.triton.gemv import num_k_splits, sum_splits
from pagoda.kernels.triton.launch import DEFAULT_LAUNCH, TritonLaunch
from pagoda.kernels.triton.quant_prims import MIN_SCALE_C, round_fp8
from pagoda.kernels.triton.row_input import PLAIN, RowInput, row_scale, row_values
from pagoda.kernels.triton.row_rotary import (
    RowRotary,
    rotary_args,
    rotary_constants,
    rotary_tile_rows,
    rotate_tile,
)

FP8_X_SHIFT = tl.constexpr(2.0**64)
"""x codes are taken times this, so that every product of codes is a normal float32."""
FP8_Y_SHIFT = tl.constexpr(2.0**56)
"""What the sum of products is multiplied by: 2**120 (the weights' bit shift) / 2**64."""
AMAX_BLOCK = 4096
"""Inputs per load of the per-token amax pass: all of a 4096-wide x in one round trip."""
ROW_INPUT_AMAX_BLOCK = 1024
"""The same for a `RowInput` other than PLAIN, whose values take two or three loads each:
at 4096 the kernel with an add + RMSNorm input held 214 registers a thread (sm_90 ptxas),
at 1024 133 (147 for a plain x at 4096)."""


def plan_row_gemv(n: int, k: int, units: int) -> GemvTiles:
    """16 weight rows of 1024 inputs a step (fewer where K is shorter), K split when the
    column tiles leave multiprocessors idle; 64 rows of 256 inputs when even those give
    every multiprocessor a program (on the H200, gate_up's 28672 rows: 33.3 µs against
    34.4, ci/bench_quant_kernels.py)."""
    block_n, block_k = (64, 256) if triton.cdiv(n, 64) >= units else (16, 1024)
    block_k = min(block_k, pow2(k, 16))
    return GemvTiles(block_n, block_k, num_k_splits(triton.cdiv(n, block_n), k, units))


def fp8_ok_for_row(weight: torch.Tensor) -> bool:
    """Whether `fp8_row_gemv` reads this e4m3 weight [N, K] as words: rows of whole,
    aligned words."""
    return weight.stride(0) % 4 == 0 and weight.shape[1] % 4 == 0 and weight.data_ptr() % 4 == 0


@triton.jit
def _fp8_lane(words, BYTE: tl.constexpr):
    """Byte BYTE of every uint32 word (an e4m3 code) as float32 code * 2**-120."""
    a = words << (24 - 8 * BYTE)  # the code's sign to bit 31
    return ((a & 0x80000000) | ((a >> 4) & 0x07F00000)).to(tl.float32, bitcast=True)


@triton.jit
def _x_lane(x_ptr, r_ptr, nw_ptr, inv_rms, K, word, hi, BYTE: tl.constexpr,
            EVEN_K: tl.constexpr, INPUT: tl.constexpr, HAS_RESIDUAL: tl.constexpr):
    """x at the inputs of byte BYTE of the words at `word`, as float32 (0 from input hi);
    x a `RowInput`."""
    xk = 4 * word + BYTE
    if INPUT != PLAIN:
        x = row_values(x_ptr, r_ptr, nw_ptr, xk, xk < hi, inv_rms, K, INPUT, HAS_RESIDUAL)
    elif EVEN_K:
        x = tl.load(x_ptr + xk)
    else:
        x = tl.load(x_ptr + xk, mask=xk < hi, other=0.0)
    return x.to(tl.float32)


@triton.jit
def _x_lanes(x_ptr, r_ptr, nw_ptr, inv_rms, K, word, hi, inv, EVEN_K: tl.constexpr,
             INPUT: tl.constexpr, HAS_RESIDUAL: tl.constexpr):
    """x at the inputs of the four bytes of the words at `word`, times `inv`."""
    x0 = _x_lane(x_ptr, r_ptr, nw_ptr, inv_rms, K, word, hi, 0, EVEN_K, INPUT, HAS_RESIDUAL)
    x1 = _x_lane(x_ptr, r_ptr, nw_ptr, inv_rms, K, word, hi, 1, EVEN_K, INPUT, HAS_RESIDUAL)
    x2 = _x_lane(x_ptr, r_ptr, nw_ptr, inv_rms, K, word, hi, 2, EVEN_K, INPUT, HAS_RESIDUAL)
    x3 = _x_lane(x_ptr, r_ptr, nw_ptr, inv_rms, K, word, hi, 3, EVEN_K, INPUT, HAS_RESIDUAL)
    return x0 * inv, x1 * inv, x2 * inv, x3 * inv


@triton.jit
def _e4m3_lanes(words):
    """The four e4m3 codes of every uint32 word as float32 values, byte b in lane b: two
    packed conversions to float16 pairs (exact), then to float32 (PTX, sm_89 and later)."""
    return tl.inline_asm_elementwise(
        """{
        .reg .b16 lo, hi;
        .reg .b32 a, b;
        mov.b32 {lo, hi}, $4;
        cvt.rn.f16x2.e4m3x2 a, lo;
        cvt.rn.f16x2.e4m3x2 b, hi;
        mov.b32 {lo, hi}, a;
        cvt.f32.f16 $0, lo;
        cvt.f32.f16 $1, hi;
        mov.b32 {lo, hi}, b;
        cvt.f32.f16 $2, lo;
        cvt.f32.f16 $3, hi;
        }""",
        "=f,=f,=f,=f,r", [words], dtype=(tl.float32,) * 4, is_pure=True, pack=1)


@triton.jit
def _round_e4m3_pair(u, v):
    """float32 u and v (divided by the scale) saturated to +-448 and rounded to the nearest
    e4m3 value, ties to even, as float32: one packed conversion there and one back."""
    return tl.inline_asm_elementwise(
        """{
        .reg .b16 q, lo, hi;
        .reg .b32 h;
        cvt.rn.satfinite.e4m3x2.f32 q, $3, $2;
        cvt.rn.f16x2.e4m3x2 h, q;
        mov.b32 {lo, hi}, h;
        cvt.f32.f16 $0, lo;
        cvt.f32.f16 $1, hi;
        }""",
        "=f,=f,f,f", [u, v], dtype=(tl.float32, tl.float32), is_pure=True, pack=1)


@triton.jit
def _fp8_row_gemv_kernel(
    out_ptr, part_ptr, x_ptr, r_ptr, nw_ptr, sum_ptr, eps, positions_ptr, cos_sin_ptr,
    stride_cs, rotated_rows, xs_ptr, w_ptr, ws_ptr, bias_ptr, N, K, split_words, stride_ww,
    STATIC: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
    HAS_BIAS: tl.constexpr, NUM_SPLITS: tl.constexpr, STAGES: tl.constexpr,
    X_BLOCK: tl.constexpr, ASM: tl.constexpr, INPUT: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr, NORM_BLOCK: tl.constexpr, ROTARY: tl.constexpr,
    IS_NEOX: tl.constexpr, HEAD_SIZE: tl.constexpr, PDL: tl.constexpr,
):
    """Columns [BLOCK_N * program 0, +BLOCK_N) of x [1, K] W^T over the words of split
    `program 1` (the output, or float32 partial sums [NUM_SPLITS, 1, N]); x is quantized
    per token (a first pass for its amax, X_BLOCK inputs a load) or by the static scale xs.
    ASM converts codes with PTX conversions (`_e4m3_lanes`), else by bit moves. Offsets
    and strides count words, so that their alignment is known and loads are 16 bytes. x is
    a `RowInput` (r_ptr, nw_ptr, sum_ptr and eps its other arguments); ROTARY rotates the
    output's heads (a `RowRotary`: positions_ptr to rotated_rows)."""
    wait_for_prior_kernels(PDL)
    WORDS: tl.constexpr = BLOCK_K // 4
    split = tl.program_id(1)
    inv_rms = row_scale(x_ptr, r_ptr, nw_ptr, sum_ptr, K, eps, INPUT, HAS_RESIDUAL, NORM_BLOCK)
    n = rotary_tile_rows(tl.program_id(0), BLOCK_N, ROTARY, HEAD_SIZE, IS_NEOX)
    nc = tl.minimum(n, N - 1)  # rows past N read row N - 1, never stored
    j = tl.arange(0, WORDS)[None, :]  # 2-D, so that x lanes share the weight's layout
    words_ptr = w_ptr.to(tl.pointer_type(tl.uint32), bitcast=True)
    w_tile = words_ptr + nc.to(tl.int64)[:, None] * stride_ww + j
    lo = split * split_words
    hi = tl.minimum(lo + split_words, K // 4)

    if STATIC:
        xs = tl.load(xs_ptr).to(tl.float32)
    else:
        xk = tl.arange(0, X_BLOCK)
        amax = tl.zeros([X_BLOCK], dtype=tl.float32)
        for start in range(0, K, X_BLOCK):
            x = row_values(x_ptr, r_ptr, nw_ptr, start + xk, start + xk < K, inv_rms, K, INPUT,
                           HAS_RESIDUAL)
            amax = tl.maximum(amax, tl.abs(x))
        xs = tl.math.div_rn(tl.maximum(tl.max(amax, axis=0), MIN_SCALE_C * 448.0), 448.0)
    inv = 1.0 / xs  # a multiply per x, as the general gemv quantizes

    acc = tl.zeros([BLOCK_N, WORDS], dtype=tl.float32)
    for start in tl.range(lo, hi, WORDS, num_stages=STAGES):
        word = start + j
        if EVEN_K:
            words = tl.load(w_tile + start)
        else:
            words = tl.load(w_tile + start, mask=word < hi, other=0)
        x0, x1, x2, x3 = _x_lanes(x_ptr, r_ptr, nw_ptr, inv_rms, K, word, 4 * hi, inv, EVEN_K,
                                  INPUT, HAS_RESIDUAL)
        if ASM:
            w0, w1, w2, w3 = _e4m3_lanes(words)
            x0, x1 = _round_e4m3_pair(x0, x1)
            x2, x3 = _round_e4m3_pair(x2, x3)
            acc = tl.fma(w0, x0, acc)
            acc = tl.fma(w1, x1, acc)
            acc = tl.fma(w2, x2, acc)
            acc = tl.fma(w3, x3, acc)
        else:
            acc += _fp8_lane(words, 0) * (round_fp8(x0) * FP8_X_SHIFT)
            acc += _fp8_lane(words, 1) * (round_fp8(x1) * FP8_X_SHIFT)
            acc += _fp8_lane(words, 2) * (round_fp8(x2) * FP8_X_SHIFT)
            acc += _fp8_lane(words, 3) * (round_fp8(x3) * FP8_X_SHIFT)
    y = tl.sum(acc, axis=1) * xs * tl.load(ws_ptr + nc)
    if not ASM:
        y *= FP8_Y_SHIFT
    if NUM_SPLITS == 1:
        if HAS_BIAS:
            y += tl.load(bias_ptr + nc).to(tl.float32)
        if ROTARY:
            y = rotate_tile(y, tl.program_id(0), positions_ptr, cos_sin_ptr, stride_cs,
                            rotated_rows, out_ptr.dtype.element_ty, BLOCK_N, HEAD_SIZE, IS_NEOX)
        tl.store(out_ptr + n, y.to(out_ptr.dtype.element_ty), mask=n < N)
    else:
        tl.store(part_ptr + split * N + n, y, mask=n < N)


def fp8_row_gemv(out2: torch.Tensor, x2: torch.Tensor | RowInput, static: torch.Tensor | None,
                 weight: torch.Tensor, wscale: torch.Tensor, bias: torch.Tensor | None,
                 plan: GemvTiles | None = None, *,
                 launch: TritonLaunch = DEFAULT_LAUNCH,
                 rotary: RowRotary | None = None) -> torch.Tensor:
    """out2 [1, N] = fp8_linear of x2 [1, K] (quantized per token, or by `static`; or the
    row a `RowInput` describes) with the e4m3 weight [N, K] (`fp8_ok_for_row`) and its
    float32 row scales [N], its heads rotated as `rotary` says (`RowRotary.fits` the
    plan), launched with `launch`'s dependent launch."""
    row = x2 if isinstance(x2, RowInput) else RowInput.plain(x2)
    n, k = weight.shape
    assert row.width == k, f"{row.width} inputs for a weight of {k}"
    plan = plan or plan_row_gemv(n, k, parallel_units(row.x.device))
    split_len = triton.cdiv(triton.cdiv(k, plan.num_splits), plan.block_k) * plan.block_k
    splits = triton.cdiv(k, split_len)
    part = (torch.empty((splits, 1, n), dtype=torch.float32, device=row.x.device)
            if splits > 1 else out2)
    b = bias if bias is not None else wscale  # a placeholder when unused
    _fp8_row_gemv_kernel[(triton.cdiv(n, plan.block_n), splits)](
        out2, part, *row.kernel_args(),
        *rotary_args(rotary, out2),
        static if static is not None else wscale, weight, wscale, b, n, k, split_len // 4,
        weight.stride(0) // 4,
        STATIC=static is not None, BLOCK_N=plan.block_n, BLOCK_K=plan.block_k,
        EVEN_K=k % plan.block_k == 0, HAS_BIAS=bias is not None, NUM_SPLITS=splits,
        STAGES=plan.num_stages,
        X_BLOCK=min(pow2(k, 16), AMAX_BLOCK if row.kind == PLAIN else ROW_INPUT_AMAX_BLOCK),
        ASM=not interpreted(_fp8_row_gemv_kernel), **row.kernel_constants(),
        **rotary_constants(rotary),
        num_warps=plan.num_warps, num_stages=plan.num_stages, **launch.dependency("gemv"),
    )
    if splits > 1:
        sum_splits(out2, part, bias, splits, launch=launch)
    return out2
