"""CPU providers of the quantized linears: `fp8_linear`, `int8_linear`, `woq_linear`.

Each op's `prepare` turns the canonical weight (`pagoda.quant.tensors`) into a
`CpuQuantWeight`; `impl(x, prepared, bias)` runs it. What a layer becomes depends on the
weight and on the activation dtype, which the op table's `prepare(weight)` is not told:
`prepare(weight, dtype)` builds the layout at once; without `dtype` it is built at the
layer's first call, in that call's dtype, and the canonical weight is then released (a
model runs in one dtype; a later call in another dtype runs on the layout as built, see
`CpuQuantWeight`). Layers that run dequantized are logged at INFO, once per kind of
weight, shape and reason (the log names no layer: prepare is not told which it is).

Decisions, measured with `ci/bench_cpu_quant_ops.py` (torch 2.13, one thread, median
microseconds, weights read from memory; "Zen 5" has AVX-512 and AVX512-BF16, "AVX2" is the
same machine under ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2, standing in for a
Zen 3; the machine was shared, so numbers move by up to 2x between runs, not the ratios
quoted here; 2048->8192 unless said):

- int8 W8A8 (`int8_linear`): `torch._int_mm` (exact int32 sums; the weight as a transposed
  view of the int8 [N, K]: a contiguous [K, N] copy is 2-4x slower) after quantizing the
  activations per token exactly as the reference does, scales applied in float32. Zen 5:
  M=1 930 vs dense f32 3130 (bf16 2170), M=16 2680 vs 10050 (bf16 2910), M=256 13200 vs
  101000 (bf16 20200), at 1 byte a weight. But oneDNN runs it without VNNI (Zen 3, older
  x86: AVX2, AVX-512 without VNNI) on vpmaddubsw, which saturates pairs of products in
  int16: full-range inputs come out wrong by tens of thousands. `int_mm_exact` tries it
  once on worst-case inputs; where it is not exact the layer runs dense (float32 weight
  on such CPUs, the activations still rounded through int8). (Its speed on AVX2 would
  not have paid anyway: M=1 4060 vs dense f32 3230.)
- 4-bit groups (`woq_linear`: GPTQ, AWQ, compressed-tensors, GGUF Q4_0 / Q4_1):
  `_weight_int4pack_mm_for_cpu` for bfloat16 activations. Torch 2.13 accepts kernel groups
  of 32, 64, 128 and 256 with K a multiple of the group and N a multiple of 16: any group
  that is a multiple of 32 runs (scales repeated to the largest kernel group dividing it,
  which is exact) and N is padded with rows of zero weights. The kernel computes
  w = (q - 8) * scale + zero, so zero = offset + 8 * scale, in the activation dtype (the
  rounding of asymmetric zeros is put back, see `Int4Layout`). Zen 5, symmetric groups of
  32: M=1 560 vs dense bf16 2170 (SmolLM2's 576->1536: 94 vs 240), M=16 3500 vs 2900,
  M=256 57000 vs 20000 (prefill is 2-3x slower than dense bf16, decode 2.5-4x faster, at a
  quarter of the memory); with offsets (Q4_1, AWQ) +15-40% at M=1 for the correction.
  AVX2: M=1 1980 vs dense f32 3230, M=16 8000 vs 10500, M=256 130000 vs 99000 (dense
  bf16 there: 1370, 21700, 329000): the kernel with or without native bf16.
  Its float32 and float16 paths are 9-80x slower than dense float32 (M=1 27300 vs 3130)
  and feeding it bfloat16 copies of float32 / float16 activations would round them past
  those dtypes' tolerances: for float32 and float16 activations the layer runs dense.
- 8-bit groups (GGUF Q8_0): PyTorch has no CPU kernel with group scales
  (`_weight_int8pack_mm` has one scale per row), so the layer runs dense. An exact
  alternative was measured (`split_int8_layout`): codes split into 4-bit halves,
  w = hi * 16s + lo * s + o, one int4 kernel call over 2K inputs, 1 byte a weight: Zen 5
  M=1 1400 vs dense bf16 2170, but M=16 8400 vs 2900 and M=256 123000 vs 20000, and on
  AVX2 slower than dense float32 at every M: not used.
- fp8 W8A8 (`fp8_linear`): `torch._scaled_mm` runs on the CPU in torch 2.13 (row-wise and
  tensor-wise scales, exact) but 3-40x slower than dense F.linear (M=1 115000 vs 3130), so
  the layer runs dense, per-row and 128x128-blocked weights alike; the activations are
  still rounded through float8 per token (or per token and group of bk inputs), exactly
  as the reference does (that costs 10-30% at M=1 over dense bf16).
- Dense layers hold the dequantized weight in the activation dtype where the CPU has
  native matmuls for it, else in float32 with the activations widened for the product
  (more exact than the reference asks). Without native bf16 (AVX2) a bfloat16 F.linear is
  2.4x faster than float32 at M=1 (it reads half the bytes) but 2-4x slower from M=16 on
  (M=16 21700 vs 10500, M=256 329000 vs 99000); float16 on Zen 5 (no AVX512-FP16) is the
  same (M=16 21800 vs 9800, M=256 316000 vs 98000): float32 avoids those cliffs at twice
  the memory. Native bf16 / fp16 is read from the CPU flags (`has_fast_bf16`, `fast_fp16`);
  PAGODA_CPU_FAST_BF16 / PAGODA_CPU_FAST_FP16 = 0 or 1 override the detection.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable

import torch
import torch.nn.functional as F

from pagoda.quant.tensors import (
    FP8_MAX,
    INT8_MAX,
    Fp8Weight,
    GroupQuantWeight,
    Int8Weight,
    per_token_scale,
    quantize_fp8,
    quantize_int8,
)
from pagoda_cpu.host import cpu_flags, has_fast_bf16

logger = logging.getLogger(__name__)

FAST_BF16_ENV = "PAGODA_CPU_FAST_BF16"
""""1" or "0": whether to treat this CPU as having native bf16 matmuls (default: detect)."""
FAST_FP16_ENV = "PAGODA_CPU_FAST_FP16"
""""1" or "0": the same for float16 matmuls (AVX512-FP16 or AMX-FP16)."""

INT4_GROUPS = (256, 128, 64, 32)
"""The group sizes `_weight_int4pack_mm_for_cpu` accepts, largest first."""
INT4_N_MULTIPLE = 16
"""`_convert_weight_to_int4pack_for_cpu` wants the output rows in multiples of 16."""


def _forced(env: str) -> bool | None:
    value = os.environ.get(env, "").strip()
    return value == "1" if value in ("0", "1") else None


def fast_bf16() -> bool:
    """Whether bfloat16 matmuls run natively here (FAST_BF16_ENV overrides the detection)."""
    forced = _forced(FAST_BF16_ENV)
    return has_fast_bf16() if forced is None else forced


def fast_fp16() -> bool:
    """Whether float16 matmuls run natively here (FAST_FP16_ENV overrides the detection)."""
    forced = _forced(FAST_FP16_ENV)
    return bool(cpu_flags() & {"avx512_fp16", "amx_fp16"}) if forced is None else forced


def dense_dtypes(native_bf16: bool, native_fp16: bool) -> dict[torch.dtype, torch.dtype]:
    """Activation dtype -> the dtype of a dense (dequantized) weight for it: itself where
    its matmuls are native, else float32 (the activations are widened for the product)."""
    return {torch.float32: torch.float32,
            torch.bfloat16: torch.bfloat16 if native_bf16 else torch.float32,
            torch.float16: torch.float16 if native_fp16 else torch.float32}


_logged: set[tuple[object, ...]] = set()


def _log_dense(op: str, shape: torch.Size, what: str, dtype: torch.dtype, why: str) -> None:
    """INFO once per kind of weight, shape and reason (a model repeats its layer shapes)."""
    key = (op, tuple(shape), what, dtype, why)
    if key in _logged:
        return
    _logged.add(key)
    logger.info("%s: %s weight [%d, %d] runs dequantized to a dense %s weight: %s",
                op, what, shape[0], shape[1], str(dtype).removeprefix("torch."), why)


# Layouts: what a prepared weight holds for one activation dtype. `apply(flat, bias)` takes
# x [T, K] and returns x @ W^T + bias [T, N] in float32 or x's dtype (the op casts it).


class DenseLayout:
    """The dequantized weight; the activations are cast to its dtype for the product."""

    def __init__(self, weight: torch.Tensor):
        self.weight = weight

    def apply(self, flat: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        w = self.weight
        b = None if bias is None else bias.to(w.dtype)
        return F.linear(flat.to(w.dtype), w, b)


class Int4Layout:
    """`_weight_int4pack_mm_for_cpu`'s packed weight [N', K' / 2] (N' = N padded to 16;
    K' = K, or 2K for an 8-bit weight split in two 4-bit halves) and its scales and zeros
    [K' / group, N', 2] in the activation dtype (w = (q - 8) * scale + zero).

    Rounding a zero to bfloat16 moves every weight of its group alike, which adds up over
    the group's inputs (asymmetric groups: |zero| up to 8 scales); that error is put back:
    `zero_residual` [G, N'] (G = K' / group) is what rounding took away, and x's sums over
    each group times it are added to the output in float32 (one addmm: a bfloat16 mm of
    one row costs ~18 us here, a float32 one ~3). It costs 4 bytes a group and output
    (groups of 32: 1/8 byte a weight). Symmetric groups (zero 0) have none.
    """

    def __init__(self, packed: torch.Tensor, group: int, scales_and_zeros: torch.Tensor,
                 n: int, halves: int = 1, dtype: torch.dtype = torch.bfloat16):
        self.packed, self.group, self.n, self.halves = packed, group, n, halves
        self.dtype = dtype
        self.scales_and_zeros = scales_and_zeros.to(dtype)
        residual = scales_and_zeros[..., 1].float() - self.scales_and_zeros[..., 1].float()
        self.zero_residual = residual if bool(residual.any()) else None

    def apply(self, flat: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        sz = self.scales_and_zeros
        if flat.dtype != sz.dtype:  # only when one weight serves two model dtypes
            sz = sz.to(flat.dtype)
        xin = flat.contiguous() if self.halves == 1 else torch.cat([flat] * self.halves, 1)
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(xin, self.packed, self.group, sz)
        if self.zero_residual is not None or bias is not None:
            y = y.float()
            if self.zero_residual is not None:
                sums = xin.view(xin.shape[0], -1, self.group).sum(-1, dtype=torch.float32)
                y = y.addmm_(sums, self.zero_residual)
            if bias is not None:
                y = y[:, : self.n] + bias.float()
        return y[:, : self.n] if y.shape[1] != self.n else y


class Int8Layout:
    """The int8 weight as `torch._int_mm`'s right operand [K, N] (a transposed view), its
    float32 row scales [1, N] and the static input scale [1, 1] if any."""

    def __init__(self, weight: Int8Weight):
        self.weight_t = weight.weight.t()
        self.scale = weight.scale.float().reshape(1, -1)
        self.input_scale = (None if weight.input_scale is None
                            else weight.input_scale.float().reshape(1, 1))

    def apply(self, flat: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        scale = (per_token_scale(flat, INT8_MAX) if self.input_scale is None
                 else self.input_scale)
        acc = torch._int_mm(quantize_int8(flat, scale), self.weight_t)
        y = acc.float() * scale * self.scale
        return y if bias is None else y + bias.float()


Layout = DenseLayout | Int4Layout | Int8Layout


class CpuQuantWeight:
    """A prepared weight: its layout for the activation dtype, built from the canonical
    weight once that dtype is known (at prepare when given, else at the first call).

    After the first build the canonical weight is released. A call in another dtype then
    reuses the layout as built: `_int_mm`'s serves every dtype alike; the int4 kernel's
    scales and a dense weight keep the precision of the dtype they were built in (exact
    when it is float32). That happens only when one prepared weight serves two model
    dtypes, so it is warned about, once per shape.
    """

    def __init__(self, op: str, source: Fp8Weight | Int8Weight | GroupQuantWeight,
                 build: Callable[[object, torch.dtype, torch.dtype], Layout],
                 dense: dict[torch.dtype, torch.dtype]):
        self.op, self.shape = op, source.shape
        self.dense_dtypes = dense
        self.dtype: torch.dtype | None = None
        self.layout: Layout | None = None
        self._source: object | None = source
        self._build = build
        static = getattr(source, "input_scale", None)
        self.input_scale = None if static is None else static.float().reshape(1, 1)
        self.block: tuple[int, int] | None = getattr(source, "block", None)

    def for_dtype(self, dtype: torch.dtype) -> Layout:
        if self.layout is None:
            dense = self.dense_dtypes.get(dtype, torch.float32)
            self.layout = self._build(self._source, dtype, dense)
            self.dtype, self._source = dtype, None
        elif dtype != self.dtype and not isinstance(self.layout, Int8Layout):
            key = (self.op, "redtype", tuple(self.shape), self.dtype, dtype)
            if key not in _logged:
                _logged.add(key)
                logger.warning("%s: a weight prepared for %s activations is called with %s "
                               "ones; its layout is used as built (%s)", self.op,
                               self.dtype, dtype, type(self.layout).__name__)
        return self.layout

    def storage_bytes(self) -> int:
        """Bytes the built layout holds (0 before it is built)."""
        if self.layout is None:
            return 0
        if isinstance(self.layout, DenseLayout):
            tensors = [self.layout.weight]
        elif isinstance(self.layout, Int4Layout):
            tensors = [self.layout.packed, self.layout.scales_and_zeros]
            if self.layout.zero_residual is not None:
                tensors.append(self.layout.zero_residual)
        else:
            tensors = [self.layout.weight_t, self.layout.scale]
        return sum(t.untyped_storage().nbytes() for t in tensors)


def _prepared(op: str, weight: object,
              build: Callable[[object, torch.dtype, torch.dtype], Layout],
              dtype: torch.dtype | None, native_bf16: bool | None,
              native_fp16: bool | None) -> CpuQuantWeight:
    dense = dense_dtypes(fast_bf16() if native_bf16 is None else native_bf16,
                         fast_fp16() if native_fp16 is None else native_fp16)
    prepared = CpuQuantWeight(op, weight, build, dense)  # type: ignore[arg-type]
    if dtype is not None:
        prepared.for_dtype(dtype)
    return prepared


def _finish(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return y.to(x.dtype).view(*x.shape[:-1], y.shape[-1])


# int8_linear


@functools.cache
def int_mm_exact() -> bool:
    """Whether `torch._int_mm` sums int8 products exactly on this CPU.

    It does with VNNI (AVX512-VNNI, AVX-VNNI, AMX). Without (Zen 3 and older x86, which
    oneDNN runs with vpmaddubsw: activations shifted to uint8, pairs of products summed
    in saturating int16) full-range inputs come out wrong by thousands. So it is tried once
    on worst-case inputs rather than trusted from the CPU flags.
    """
    if not hasattr(torch, "_int_mm"):
        return False
    gen = torch.Generator().manual_seed(0)
    for m in (1, 33):  # a matrix-vector and a matrix-matrix kernel
        a = torch.randint(-128, 128, (m, 256), generator=gen, dtype=torch.int8)
        b = torch.randint(-127, 128, (48, 256), generator=gen, dtype=torch.int8)
        a[0], b[0] = 127, 127
        try:
            got = torch._int_mm(a, b.t())
        except RuntimeError:
            return False
        if not torch.equal(got.long(), a.long() @ b.long().t()):
            return False
    return True


def _build_int8(weight: Int8Weight, dtype: torch.dtype, dense: torch.dtype) -> Layout:
    if int_mm_exact():
        return Int8Layout(weight)
    _log_dense("int8_linear", weight.shape, "int8", dense,
               "torch._int_mm does not sum int8 products exactly on this CPU (no VNNI)")
    return DenseLayout(weight.dequantize().to(dense))


def prepare_int8(weight: Int8Weight, dtype: torch.dtype | None = None, *,
                 native_bf16: bool | None = None,
                 native_fp16: bool | None = None) -> CpuQuantWeight:
    """The int8 weight as it is (no copy) for `torch._int_mm`, or dense without VNNI."""
    return _prepared("int8_linear", weight, _build_int8, dtype, native_bf16, native_fp16)


def int8_linear(x: torch.Tensor, weight: CpuQuantWeight,
                bias: torch.Tensor | None = None) -> torch.Tensor:
    flat = x.reshape(-1, x.shape[-1])
    layout = weight.for_dtype(x.dtype)
    if isinstance(layout, Int8Layout):
        return _finish(layout.apply(flat, bias), x)
    # dense: the activations rounded through int8 as the reference rounds them
    scale = per_token_scale(flat, INT8_MAX) if weight.input_scale is None else weight.input_scale
    return _finish(layout.apply(quantize_int8(flat, scale).float() * scale, bias), x)


# fp8_linear


def _build_fp8(weight: Fp8Weight, dtype: torch.dtype, dense: torch.dtype) -> Layout:
    what = "blocked float8" if weight.block is not None else "float8"
    _log_dense("fp8_linear", weight.shape, what, dense,
               "torch._scaled_mm runs on the CPU but 3-40x slower than dense F.linear")
    return DenseLayout(weight.dequantize().to(dense))


def prepare_fp8(weight: Fp8Weight, dtype: torch.dtype | None = None, *,
                native_bf16: bool | None = None,
                native_fp16: bool | None = None) -> CpuQuantWeight:
    """The weight dequantized (dense, in the activation dtype's dense dtype)."""
    return _prepared("fp8_linear", weight, _build_fp8, dtype, native_bf16, native_fp16)


def fp8_linear(x: torch.Tensor, weight: CpuQuantWeight,
               bias: torch.Tensor | None = None) -> torch.Tensor:
    """The activations rounded through float8 as the reference rounds them, then dense."""
    flat = x.reshape(-1, x.shape[-1])
    group = weight.block[1] if weight.block is not None else None
    if weight.input_scale is not None:
        scale = weight.input_scale
    else:
        scale = per_token_scale(flat, FP8_MAX, group)
    xq = quantize_fp8(flat, scale, group).float()
    if group is not None and scale.shape[1] > 1:
        scale = scale.repeat_interleave(group, dim=1)[:, : flat.shape[1]]
    layout = weight.for_dtype(x.dtype)
    return _finish(layout.apply(xq * scale, bias), x)


# woq_linear


def int4_kernel_group(group_size: int) -> int | None:
    """The largest kernel group size that divides `group_size` (None: none does)."""
    if not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"):
        return None
    return next((g for g in INT4_GROUPS if group_size % g == 0), None)


def pack_int4(codes: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor,
              group_size: int, dtype: torch.dtype = torch.bfloat16) -> Int4Layout:
    """4-bit codes [N, K] with the kernel's scales and zeros [N, K / group_size]
    (w = (q - 8) * scale + zero) as an `Int4Layout`."""
    kernel_group = int4_kernel_group(group_size)
    assert kernel_group is not None
    repeat = group_size // kernel_group
    scales = scales.float().repeat_interleave(repeat, 1)
    zeros = zeros.float().repeat_interleave(repeat, 1)
    n = codes.shape[0]
    pad = -n % INT4_N_MULTIPLE
    codes = codes.to(torch.int32)
    if pad:  # rows of zero weights (scale and zero 0), cut from the output
        codes = F.pad(codes, (0, 0, 0, pad))
        scales, zeros = F.pad(scales, (0, 0, 0, pad)), F.pad(zeros, (0, 0, 0, pad))
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
    scales_and_zeros = torch.stack([scales, zeros], dim=-1).transpose(0, 1).contiguous()
    return Int4Layout(packed, kernel_group, scales_and_zeros, n, dtype=dtype)


def _int4_layout(weight: GroupQuantWeight, dtype: torch.dtype) -> Int4Layout:
    scales, offsets = weight.scales.float(), weight.offsets.float()
    return pack_int4(weight.codes, scales, offsets + 8 * scales, weight.group_size, dtype)


def split_int8_layout(weight: GroupQuantWeight,
                      dtype: torch.dtype = torch.bfloat16) -> Int4Layout:
    """An 8-bit weight exactly as two 4-bit halves over 2K inputs (x repeated):
    w = c * s + o = hi * 16s + lo * s + o, c = 16 hi + lo; the kernel's zero is o + 128s
    for the high half (w_hi = (hi - 8) * 16s + zero) and 8s for the low one.
    Measured, not used by default (see the module docstring)."""
    s, o = weight.scales.float(), weight.offsets.float()
    codes = torch.cat([weight.codes >> 4, weight.codes & 15], dim=1)
    layout = pack_int4(codes, torch.cat([16 * s, s], 1), torch.cat([o + 128 * s, 8 * s], 1),
                       weight.group_size, dtype)
    layout.halves = 2
    return layout


def woq_dense_reason(weight: GroupQuantWeight, dtype: torch.dtype) -> str | None:
    """Why this weight runs dense for activations of `dtype`, or None (the int4 kernel)."""
    if weight.bits != 4:
        return f"no CPU kernel takes {weight.bits}-bit codes with group scales"
    if int4_kernel_group(weight.group_size) is None:
        return (f"the CPU int4 kernel takes groups of {', '.join(map(str, INT4_GROUPS))} "
                f"(or multiples of 32), not {weight.group_size}")
    if dtype != torch.bfloat16:
        return (f"the CPU int4 kernel is scalar for {str(dtype).removeprefix('torch.')} "
                "activations (9-80x slower than dense)")
    return None


def _build_woq(weight: GroupQuantWeight, dtype: torch.dtype, dense: torch.dtype) -> Layout:
    reason = woq_dense_reason(weight, dtype)
    if reason is None:
        return _int4_layout(weight, dtype)
    _log_dense("woq_linear", weight.shape, f"{weight.bits}-bit group-{weight.group_size}",
               dense, reason)
    return DenseLayout(weight.dequantize().to(dense))


def prepare_woq(weight: GroupQuantWeight, dtype: torch.dtype | None = None, *,
                native_bf16: bool | None = None,
                native_fp16: bool | None = None) -> CpuQuantWeight:
    """4-bit groups packed for the int4 kernel (bfloat16 activations), else dense."""
    return _prepared("woq_linear", weight, _build_woq, dtype, native_bf16, native_fp16)


def woq_linear(x: torch.Tensor, weight: CpuQuantWeight,
               bias: torch.Tensor | None = None) -> torch.Tensor:
    flat = x.reshape(-1, x.shape[-1])
    return _finish(weight.for_dtype(x.dtype).apply(flat, bias), x)

