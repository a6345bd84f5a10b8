"""Building blocks of the quantized-linear kernels: rounding to float8 e4m3 and to int8 as
the references do (`pagoda.quant.tensors`), unpacking packed integer codes, and the
activation-quantization kernel of the larger-batch paths.

Rounding. Activations are divided by their scale in float32, saturated, and rounded to the
nearest representable value, ties to even (float8 e4m3: 3 mantissa bits; int8: integers).
On a GPU the float8 conversion instruction rounds that way; Triton's CPU interpreter does
not (it loses the carry into the exponent), so under the interpreter `quantize_fp8` rounds
in float32 first, exactly, and the conversion then only changes the type. Integers round
with the float32 trick (v + 1.5 * 2**23) - 1.5 * 2**23, exact for |v| < 2**22.

Packed codes. A `bits`-bit weight's codes travel as int32 words of PACK = 32 // bits codes,
consecutive along K. Code f of a word (k = PACK * word + f) sits in bit field
bitrev(f) (the log2(PACK)-bit reversal of f): the order `unpack_biased` builds with nested
`tl.join`s, which keep every word's codes in the thread that loaded it. A code becomes a
float32 without a conversion instruction: shifted to a fixed bit of 1.0's mantissa and
OR-ed into it, it reads as 1 + code * 2**-B, and the kernels fold the 1 and the 2**B into
each group's scale and offset (`unpack_biased`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.kernels.triton.common import interpreted, pow2
from pagoda.quant.tensors import MIN_SCALE

ROUND_MAGIC = 12582912.0  # 1.5 * 2**23
MIN_SCALE_C = tl.constexpr(MIN_SCALE)
"""Smallest activation scale, times QMAX: what the references clamp amax to."""
QUANT_BLOCK = 1024
"""Inputs per step of the activation-quantization kernel (per-token scales)."""
ONE_PASS_MAX = 16384
"""The longest row (a power of two up) the kernel quantizes per token from one load."""
ONE_PASS_INPUTS_A_WARP = 1024
ONE_PASS_MAX_WARPS = 16
"""Warps of a one-load program: one per this many inputs, 4 to 16."""


@triton.jit
def round_fp8(v):
    """float32 v saturated to +-448 and rounded to the nearest float8 e4m3 value, ties to
    even, as float32: float arithmetic only (no conversion instructions)."""
    v = tl.minimum(tl.maximum(v, -448.0), 448.0)
    exponent = tl.maximum((v.to(tl.int32, bitcast=True) >> 23) & 0xFF, 127 - 6)  # subnormals
    step = ((exponent - 3) << 23).to(tl.float32, bitcast=True)  # 3 mantissa bits
    inv_step = ((257 - exponent) << 23).to(tl.float32, bitcast=True)  # 1 / step, exactly
    return ((v * inv_step + 12582912.0) - 12582912.0) * step


@triton.jit
def quantize_fp8(v, EXACT: tl.constexpr):
    """float32 v (already divided by the scale) saturated to +-448 and rounded to float8
    e4m3, ties to even. EXACT rounds in float32 first (the interpreter's conversion does
    not round correctly)."""
    v = round_fp8(v) if EXACT else tl.minimum(tl.maximum(v, -448.0), 448.0)
    return v.to(tl.float8e4nv)


@triton.jit
def round_int8(v):
    """float32 v (already divided by the scale) saturated to [-128, 127] and rounded half
    to even, as float32 (an integer value)."""
    v = tl.minimum(tl.maximum(v, -128.0), 127.0)
    return (v + 12582912.0) - 12582912.0


@triton.jit
def _biased(words, field: tl.constexpr, AT: tl.constexpr, MASK: tl.constexpr):
    """The bit field at `field` of every word moved to mantissa bit AT of 1.0 (one shift
    and one logical op; none for the field already there): 1 + code * 2**(AT - 23)."""
    if field == AT:
        t = words & (MASK << AT)
    elif field < AT:
        t = (words << (AT - field)) & (MASK << AT)
    else:
        t = (words >> (field - AT)) & (MASK << AT)
    return (t | 0x3F800000).to(tl.float32, bitcast=True)


@triton.jit
def biased_unit(BITS: tl.constexpr):
    """2**B of `unpack_biased`'s 1 + code * 2**-B: 128 for 4-bit codes, 256 for 8-bit."""
    return 128.0 if BITS == 4 else 256.0


@triton.jit
def unpack_biased(words, BITS: tl.constexpr):
    """int32 words [R, W] -> 1 + code / `biased_unit(BITS)`, float32 [R, W * 32 // BITS], in
    K order: the codes of kernels that scale them anyway and fold the 1 and the unit into
    the scale and offset (`woq_gemm._dequantize`). A code sits high in the mantissa (from
    bit 16, or 15 for 8 bits), so the folded offset o - unit * s loses at most 2**-24 of
    ~unit scales: far below a code's step."""
    MASK: tl.constexpr = (1 << BITS) - 1
    AT: tl.constexpr = 16 if BITS == 4 else 15  # 2**(23 - AT) == biased_unit(BITS)
    if BITS == 4:
        t = tl.join(
            tl.join(tl.join(_biased(words, 0, AT, MASK), _biased(words, 4, AT, MASK)),
                    tl.join(_biased(words, 8, AT, MASK), _biased(words, 12, AT, MASK))),
            tl.join(tl.join(_biased(words, 16, AT, MASK), _biased(words, 20, AT, MASK)),
                    tl.join(_biased(words, 24, AT, MASK), _biased(words, 28, AT, MASK))))
    else:
        t = tl.join(tl.join(_biased(words, 0, AT, MASK), _biased(words, 8, AT, MASK)),
                    tl.join(_biased(words, 16, AT, MASK), _biased(words, 24, AT, MASK)))
    return tl.reshape(t, (words.shape[0], words.shape[1] * (32 // BITS)))


def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """uint8 codes [N, K] (K a multiple of 32 // bits) -> int32 words [N, K * bits // 32]
    in the layout `unpack_biased` reads."""
    per_word = 32 // bits
    n, k = codes.shape
    levels = per_word.bit_length() - 1
    bitrev = [int(f"{f:0{levels}b}"[::-1], 2) for f in range(per_word)]
    fields = codes.reshape(n, k // per_word, per_word).to(torch.int64)
    words = torch.zeros(n, k // per_word, dtype=torch.int64, device=codes.device)
    for f in range(per_word):
        words |= fields[:, :, f] << (bits * bitrev[f])
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


@triton.jit
def _row_scale(amax, QMAX: tl.constexpr):
    """The scale of inputs whose largest magnitude is `amax` (a vector's, reduced here)."""
    return tl.math.div_rn(tl.maximum(tl.max(amax, axis=0), MIN_SCALE_C * QMAX), QMAX)


@triton.jit
def _store_codes(q_ptr, x, scale, ok, INT8: tl.constexpr, EXACT: tl.constexpr):
    """float32 inputs x divided by the scale and rounded to their codes, stored where ok."""
    v = tl.math.div_rn(x, scale)
    tl.store(q_ptr, round_int8(v).to(tl.int8) if INT8 else quantize_fp8(v, EXACT), mask=ok)


@triton.jit(do_not_specialize=["M"])
def _act_quant_kernel(
    q_ptr, s_ptr, x_ptr, static_ptr, M, K, stride_xm, stride_qm, stride_sm,
    INT8: tl.constexpr, STATIC: tl.constexpr, GROUP: tl.constexpr, BLOCK: tl.constexpr,
    ONE_PASS: tl.constexpr, EXACT: tl.constexpr,
):
    """Row `program 0` of x [M, K] quantized: by the static scale, else per group of GROUP
    inputs (program 1 = group) when GROUP > 0, else per row: from one load of the row where
    it fits one block (ONE_PASS), else in two passes. Writes the codes [M, K] and the
    float32 scales [M, groups] (one column unless grouped)."""
    QMAX: tl.constexpr = 127.0 if INT8 else 448.0
    row = tl.program_id(0)
    k = tl.arange(0, BLOCK)
    x_row = x_ptr + row.to(tl.int64) * stride_xm
    q_row = q_ptr + row.to(tl.int64) * stride_qm
    if ONE_PASS:  # per row, the whole row in one block: loaded once
        x = tl.load(x_row + k, mask=k < K, other=0.0).to(tl.float32)
        scale = _row_scale(tl.abs(x), QMAX)
        tl.store(s_ptr + row * stride_sm, scale)
        _store_codes(q_row + k, x, scale, k < K, INT8, EXACT)
        return
    lo = tl.program_id(1) * GROUP
    hi = K
    if GROUP > 0:
        hi = tl.minimum(lo + GROUP, K)
    if STATIC:
        scale = tl.load(static_ptr).to(tl.float32)
    else:
        amax = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(lo, hi, BLOCK):
            x = tl.load(x_row + start + k, mask=start + k < hi, other=0.0).to(tl.float32)
            amax = tl.maximum(amax, tl.abs(x))
        scale = _row_scale(amax, QMAX)
    tl.store(s_ptr + row * stride_sm + tl.program_id(1), scale)
    for start in range(lo, hi, BLOCK):
        ok = start + k < hi
        x = tl.load(x_row + start + k, mask=ok, other=0.0).to(tl.float32)
        _store_codes(q_row + start + k, x, scale, ok, INT8, EXACT)


def quantize_activations(x2: torch.Tensor, int8: bool, static: torch.Tensor | None = None,
                         group: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """x2 [M, K] (unit last stride) as (codes [M, K] int8 or float8 e4m3, float32 scales
    [M, ceil(K / group)] or [M, 1]), rounded as `pagoda.quant.tensors` does; `static` (a
    float32 scalar tensor) overrides the per-token scales."""
    m, k = x2.shape
    dtype = torch.int8 if int8 else torch.float8_e4m3fn
    q = torch.empty((m, k), dtype=dtype, device=x2.device)
    grouped = static is None and group is not None
    groups = triton.cdiv(k, group) if grouped else 1
    scales = torch.empty((m, groups), dtype=torch.float32, device=x2.device)
    if m == 0 or k == 0:
        return q, scales.fill_(MIN_SCALE)
    one_pass = static is None and not grouped and pow2(k, 16) <= ONE_PASS_MAX
    block = (pow2(group, 16) if grouped else pow2(k, 16) if one_pass
             else min(QUANT_BLOCK, pow2(k, 16)))
    warps = min(ONE_PASS_MAX_WARPS, max(4, block // ONE_PASS_INPUTS_A_WARP)) if one_pass else 4
    _act_quant_kernel[(m, groups)](
        q, scales, x2, static if static is not None else scales, m, k, x2.stride(0),
        q.stride(0), scales.stride(0), INT8=int8, STATIC=static is not None,
        GROUP=group if grouped else 0, BLOCK=block, ONE_PASS=one_pass,
        EXACT=interpreted(_act_quant_kernel), num_warps=warps,
    )
    return q, scales


@triton.jit(do_not_specialize=["M"])
def _scale_rows_kernel(out_ptr, acc_ptr, xs_ptr, ws_ptr, bias_ptr, M, N, stride_om,
                       stride_am, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
    """out[m, n] = acc[m, n] * xs[m] * ws[n] (+ bias[n]) in float32: the epilogue of an
    integer matmul (torch._int_mm's int32 [M, N])."""
    m = tl.program_id(0)
    n = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = n < N
    acc = tl.load(acc_ptr + m.to(tl.int64) * stride_am + n, mask=ok, other=0).to(tl.float32)
    y = acc * tl.load(xs_ptr + m) * tl.load(ws_ptr + n, mask=ok, other=0.0)
    if HAS_BIAS:
        y += tl.load(bias_ptr + n, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + m.to(tl.int64) * stride_om + n, y.to(out_ptr.dtype.element_ty), mask=ok)


def scale_rows(out2: torch.Tensor, acc: torch.Tensor, xs: torch.Tensor, ws: torch.Tensor,
               bias: torch.Tensor | None) -> torch.Tensor:
    """`_scale_rows_kernel` into out2 [M, N]."""
    m, n = acc.shape
    block = min(pow2(n), 1024)
    _scale_rows_kernel[(m, triton.cdiv(n, block))](
        out2, acc, xs, ws, bias if bias is not None else ws, m, n, out2.stride(0),
        acc.stride(0), HAS_BIAS=bias is not None, BLOCK=block)
    return out2

