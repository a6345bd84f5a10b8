"""CPU providers of the quantized linears: `fp8_linear`, `int8_linear`, `woq_linear`.

Each op's `prepare(weight, dtype)` turns the canonical weight (`pagoda.quant.tensors`)
into a `CpuQuantWeight` for activations of the model's `dtype` (its layout,
`pagoda_cpu.quant_layouts`); `impl(x, prepared, bias)` runs it. Layers that run
dequantized are logged at INFO, once per kind of weight, shape and reason (the log names
no layer: prepare is not told which it is).

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
  alternative was measured (`ci/bench_cpu_quant_ops.py`, "q8 split"): codes split in halves,
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
from dataclasses import dataclass
from typing import Any

import torch

from pagoda.quant.tensors import (
    FP8_MAX,
    INT8_MAX,
    Fp8Weight,
    GroupQuantWeight,
    Int8Weight,
    per_token_scale,
    quantize_fp8,
    quantize_int8,
    round_activations,
)
from pagoda_cpu.host import cpu_flags, has_fast_bf16
from pagoda_cpu.quant_layouts import (
    INT4_GROUPS,
    DenseLayout,
    Int4Layout,
    Int8Layout,
    Layout,
    int4_kernel_group,
    pack_int4,
)

logger = logging.getLogger(__name__)

FAST_BF16_ENV = "PAGODA_CPU_FAST_BF16"
""""1" or "0": whether to treat this CPU as having native bf16 matmuls (default: detect)."""
FAST_FP16_ENV = "PAGODA_CPU_FAST_FP16"
""""1" or "0": the same for float16 matmuls (AVX512-FP16 or AMX-FP16)."""

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


@dataclass(frozen=True)
class CpuQuantWeight:
    """A prepared weight: its layout for the model's activation dtype, and what the ops
    round activations with (FP8 and INT8: a static input scale, FP8 blocks; weight-only:
    int8 blocks of `act_block` inputs, a GGUF's)."""

    layout: Layout
    input_scale: torch.Tensor | None = None
    block: tuple[int, int] | None = None
    act_block: int | None = None

    def storage_bytes(self) -> int:
        """Bytes the layout holds."""
        layout = self.layout
        if isinstance(layout, DenseLayout):
            tensors = [layout.weight]
        elif isinstance(layout, Int4Layout):
            tensors = [layout.packed, layout.scales_and_zeros]
            if layout.zero_residual is not None:
                tensors.append(layout.zero_residual)
        else:
            tensors = [layout.weight_t, layout.scale]
        return sum(t.untyped_storage().nbytes() for t in tensors)


Build = Callable[[Any, torch.dtype, torch.dtype], Layout]
"""(canonical weight, activation dtype, dense weight dtype) -> its layout."""


def _prepared(weight: Fp8Weight | Int8Weight | GroupQuantWeight, build: Build,
              dtype: torch.dtype, native_bf16: bool | None,
              native_fp16: bool | None) -> CpuQuantWeight:
    dense = dense_dtypes(fast_bf16() if native_bf16 is None else native_bf16,
                         fast_fp16() if native_fp16 is None else native_fp16)
    static = getattr(weight, "input_scale", None)
    return CpuQuantWeight(build(weight, dtype, dense.get(dtype, torch.float32)),
                          None if static is None else static.float().reshape(1, 1),
                          getattr(weight, "block", None), getattr(weight, "act_block", None))


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


def prepare_int8(weight: Int8Weight, dtype: torch.dtype, *,
                 native_bf16: bool | None = None,
                 native_fp16: bool | None = None) -> CpuQuantWeight:
    """The int8 weight as it is (no copy) for `torch._int_mm`, or dense without VNNI."""
    return _prepared(weight, _build_int8, dtype, native_bf16, native_fp16)


def int8_linear(x: torch.Tensor, weight: CpuQuantWeight,
                bias: torch.Tensor | None = None) -> torch.Tensor:
    flat = x.reshape(-1, x.shape[-1])
    layout = weight.layout
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


def prepare_fp8(weight: Fp8Weight, dtype: torch.dtype, *,
                native_bf16: bool | None = None,
                native_fp16: bool | None = None) -> CpuQuantWeight:
    """The weight dequantized (dense, in the activation dtype's dense dtype)."""
    return _prepared(weight, _build_fp8, dtype, native_bf16, native_fp16)


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
    layout = weight.layout
    return _finish(layout.apply(xq * scale, bias), x)


# woq_linear


def _int4_layout(weight: GroupQuantWeight, dtype: torch.dtype) -> Int4Layout:
    scales, offsets = weight.scales.float(), weight.offsets.float()
    return pack_int4(weight.codes, scales, offsets + 8 * scales, weight.group_size, dtype)


def woq_dense_reason(weight: GroupQuantWeight, dtype: torch.dtype) -> str | None:
    """Why this weight runs dense for activations of `dtype`, or None (the int4 kernel)."""
    if weight.act_block:
        return ("its activations are rounded to int8 blocks (gguf_a8), whose values the int4 "
                "kernel's bfloat16 would round again")
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
    if weight.act_block:
        dense = torch.float32  # the rounded activations multiplied as the reference does
    _log_dense("woq_linear", weight.shape, f"{weight.bits}-bit group-{weight.group_size}",
               dense, reason)
    return DenseLayout(weight.dequantize().to(dense))


def prepare_woq(weight: GroupQuantWeight, dtype: torch.dtype, *,
                native_bf16: bool | None = None,
                native_fp16: bool | None = None) -> CpuQuantWeight:
    """4-bit groups packed for the int4 kernel (bfloat16 activations), else dense."""
    return _prepared(weight, _build_woq, dtype, native_bf16, native_fp16)


def woq_linear(x: torch.Tensor, weight: CpuQuantWeight,
               bias: torch.Tensor | None = None) -> torch.Tensor:
    flat = x.reshape(-1, x.shape[-1])
    if weight.act_block:  # in float32, as the dense float32 layout takes them
        flat = round_activations(flat, weight.act_block)
    return _finish(weight.layout.apply(flat, bias), x)

