"""Compile the quantized-linear kernels' variants for an H100/H200 (sm_90) without a GPU, as
`compile_sm90.py` does for the others: catches what the interpreter accepts and a GPU
rejects (float8 and int8 `tl.dot`, joins and reshapes of unpacked codes, loop-carried
types); with them, the norm and activation kernels that quantize their output per token.
Run as a script without TRITON_INTERPRET; one line per variant.
"""

from __future__ import annotations

import re
import sys
import time
from typing import Any

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from pagoda.kernels.triton.activation import _silu_and_mul_quant_kernel
from pagoda.kernels.triton.norm import _rms_norm_kernel, _rms_norm_quant_kernel
from pagoda.kernels.triton.quant_prims import _act_quant_kernel, _scale_rows_kernel
from pagoda.kernels.triton.row_gemv import _fp8_row_gemv_kernel
from pagoda.kernels.triton.scaled_gemm import _qgemm_kernel, _qgemv_kernel
from pagoda.kernels.triton.woq_dot import _woq_dot_kernel
from pagoda.kernels.triton.woq_gemm import _woq_gemm_kernel, _woq_gemv_kernel

TARGET = GPUTarget("cuda", 90, 32)


def _signature(fn: Any, consts: dict[str, Any], types: dict[str, str]) -> dict[str, str]:
    """constexprs, the pointer types in `types` (others *bf16), int32 scalars."""
    return {name: "constexpr" if name in consts else "fp32" if name == "eps" else
            "*i64" if name == "positions_ptr" else
            types.get(name, "*bf16" if name.endswith("_ptr") else "i32")
            for name in fn.arg_names}


def _qgemv(code: str, **overrides: Any) -> dict[str, Any]:
    consts = dict(INT8=code == "*i8", X_MODE=0, BLOCKED=False, BLOCK_M=16, BLOCK_N=64,
                  BLOCK_K=256, EVEN_K=True, USE_DOT=True, DOT_F32=False, EXACT=False,
                  HAS_BIAS=False, NUM_SPLITS=1, STAGES=4)
    consts.update(overrides)
    return consts


def _qgemm(code: str, **overrides: Any) -> dict[str, Any]:
    consts = dict(INT8=code == "*i8", BLOCKED=False, X_GROUPED=False, BLOCK_M=128,
                  BLOCK_N=128, BLOCK_K=128, GROUP_M=8, DOT_F32=False, HAS_BIAS=True)
    consts.update(overrides)
    return consts


def _woq(**overrides: Any) -> dict[str, Any]:
    consts = dict(BITS=4, GROUP=128, BLOCK_M=1, BLOCK_N=8, BLOCK_K=1024, HAS_BIAS=False,
                  NUM_SPLITS=1, STAGES=3, INPUT=0, HAS_RESIDUAL=False, NORM_BLOCK=1024,
                  ROTARY=False, IS_NEOX=True, HEAD_SIZE=2)
    consts.update(overrides)
    return consts


def _row(**overrides: Any) -> dict[str, Any]:
    consts = dict(BLOCK_N=16, BLOCK_K=1024, HAS_BIAS=False, NUM_SPLITS=1, STAGES=3,
                  X_BLOCK=4096, ASM=True, INPUT=0, HAS_RESIDUAL=False, NORM_BLOCK=1024,
                  ROTARY=False, IS_NEOX=True, HEAD_SIZE=2)
    consts.update(overrides)
    return consts


def _woq_gemm(dot: Any, **overrides: Any) -> dict[str, Any]:
    consts = dict(BITS=4, GROUP=128, BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8,
                  DOT_DTYPE=dot, HAS_BIAS=True)
    consts.update(overrides)
    return consts


def _woq_dot(**overrides: Any) -> dict[str, Any]:
    consts = dict(MAGIC_BITS=0x4300, MAGIC_VALUE=128.0, GROUP=128, BLOCK_N=128, GROUPS_PER_STEP=1,
                  HAS_BIAS=False, NUM_SPLITS=1, STAGES=4, DOT_DTYPE=tl.bfloat16)
    consts.update(overrides)
    return consts


FP8 = {"w_ptr": "*fp8e4nv", "ws_ptr": "*fp32", "xs_ptr": "*fp32", "part_ptr": "*fp32"}
INT8 = {"w_ptr": "*i8", "ws_ptr": "*fp32", "xs_ptr": "*fp32", "part_ptr": "*fp32"}
WOQ = {"w_ptr": "*i32", "s_ptr": "*bf16", "o_ptr": "*bf16", "part_ptr": "*fp32"}

VARIANTS: list[tuple[str, Any, dict[str, Any], dict[str, str], int]] = [
    ("act quant fp8 per token, two passes", _act_quant_kernel,
     dict(INT8=False, STATIC=False, GROUP=0, BLOCK=1024, ONE_PASS=False, EXACT=False),
     {"q_ptr": "*fp8e4nv", "s_ptr": "*fp32", "static_ptr": "*fp32"}, 4),
    ("act quant fp8 per token, one load of 16384", _act_quant_kernel,
     dict(INT8=False, STATIC=False, GROUP=0, BLOCK=16384, ONE_PASS=True, EXACT=False),
     {"q_ptr": "*fp8e4nv", "s_ptr": "*fp32", "static_ptr": "*fp32"}, 16),
    ("act quant int8 per token, one load of 4096", _act_quant_kernel,
     dict(INT8=True, STATIC=False, GROUP=0, BLOCK=4096, ONE_PASS=True, EXACT=False),
     {"q_ptr": "*i8", "s_ptr": "*fp32", "static_ptr": "*fp32"}, 4),
    ("act quant int8 static", _act_quant_kernel,
     dict(INT8=True, STATIC=True, GROUP=0, BLOCK=1024, ONE_PASS=False, EXACT=False),
     {"q_ptr": "*i8", "s_ptr": "*fp32", "static_ptr": "*fp32"}, 4),
    ("act quant fp8 group 128", _act_quant_kernel,
     dict(INT8=False, STATIC=False, GROUP=128, BLOCK=128, ONE_PASS=False, EXACT=False),
     {"q_ptr": "*fp8e4nv", "s_ptr": "*fp32", "static_ptr": "*fp32"}, 4),
    ("add + rms_norm, quantized fp8 per token", _rms_norm_quant_kernel,
     dict(INT8=False, BLOCK=1024, EXACT=False), {"q_ptr": "*fp8e4nv", "s_ptr": "*fp32"}, 4),
    ("add + rms_norm, quantized int8 per token", _rms_norm_quant_kernel,
     dict(INT8=True, BLOCK=1024, EXACT=False), {"q_ptr": "*i8", "s_ptr": "*fp32"}, 4),
    ("silu_and_mul, quantized fp8 per token, one load of 16384", _silu_and_mul_quant_kernel,
     dict(INT8=False, BLOCK=16384, EXACT=False), {"q_ptr": "*fp8e4nv", "s_ptr": "*fp32"}, 16),
    ("silu_and_mul, quantized int8 per token, one load of 8192", _silu_and_mul_quant_kernel,
     dict(INT8=True, BLOCK=8192, EXACT=False), {"q_ptr": "*i8", "s_ptr": "*fp32"}, 8),
    ("int_mm epilogue", _scale_rows_kernel, dict(HAS_BIAS=True, BLOCK=1024),
     {"acc_ptr": "*i32", "xs_ptr": "*fp32", "ws_ptr": "*fp32"}, 4),
    ("qgemv fp8 dot fused", _qgemv_kernel, _qgemv("*fp8e4nv"), FP8, 4),
    ("qgemv fp8 dot split odd K bias", _qgemv_kernel,
     _qgemv("*fp8e4nv", BLOCK_N=32, EVEN_K=False, NUM_SPLITS=4, HAS_BIAS=True), FP8, 4),
    ("qgemv fp8 dot block 128 static", _qgemv_kernel,
     _qgemv("*fp8e4nv", BLOCKED=True, BLOCK_K=128, X_MODE=1), FP8, 4),
    ("qgemv fp8 dot pre-quantized", _qgemv_kernel,
     _qgemv("*fp8e4nv", X_MODE=2), {**FP8, "x_ptr": "*fp8e4nv"}, 4),
    ("qgemv fp8 fma 1 row", _qgemv_kernel,
     _qgemv("*fp8e4nv", USE_DOT=False, BLOCK_M=1, BLOCK_N=8, BLOCK_K=512, STAGES=3), FP8, 4),
    ("qgemv fp8 fma block 4 rows", _qgemv_kernel,
     _qgemv("*fp8e4nv", USE_DOT=False, BLOCKED=True, BLOCK_M=4, BLOCK_N=8, BLOCK_K=128),
     FP8, 4),
    ("qgemv int8 dot fused", _qgemv_kernel, _qgemv("*i8"), INT8, 4),
    ("qgemv int8 fma 2 rows pre-quantized", _qgemv_kernel,
     _qgemv("*i8", USE_DOT=False, X_MODE=2, BLOCK_M=2, BLOCK_N=8, BLOCK_K=512),
     {**INT8, "x_ptr": "*i8"}, 4),
    ("qgemm fp8 128x128", _qgemm_kernel, _qgemm("*fp8e4nv"),
     {**FP8, "xq_ptr": "*fp8e4nv"}, 8),
    ("qgemm fp8 block 128 grouped x", _qgemm_kernel,
     _qgemm("*fp8e4nv", BLOCKED=True, X_GROUPED=True, BLOCK_M=64, BLOCK_N=64),
     {**FP8, "xq_ptr": "*fp8e4nv"}, 4),
    ("qgemm int8 16x64", _qgemm_kernel, _qgemm("*i8", BLOCK_M=16, BLOCK_N=64),
     {**INT8, "xq_ptr": "*i8"}, 4),
    ("woq gemv int4 g128 1 row", _woq_gemv_kernel, _woq(), WOQ, 4),
    ("woq gemv int4 g128 1 row, add + rms_norm before, rotary after", _woq_gemv_kernel,
     _woq(INPUT=1, HAS_RESIDUAL=True, ROTARY=True, HEAD_SIZE=128), WOQ, 4),
    ("woq gemv int4 g128 1 row, silu_and_mul before", _woq_gemv_kernel,
     _woq(INPUT=2, NORM_BLOCK=1024), WOQ, 4),
    ("woq gemv int4 g32 8 rows split", _woq_gemv_kernel,
     _woq(GROUP=32, BLOCK_M=8, BLOCK_K=128, NUM_SPLITS=4, HAS_BIAS=True), WOQ, 4),
    ("woq gemv int8 g32 fp32 scales", _woq_gemv_kernel, _woq(BITS=8, GROUP=32, BLOCK_K=512),
     {**WOQ, "s_ptr": "*fp32", "o_ptr": "*fp32"}, 4),
    ("woq dot int4 g128 bf16", _woq_dot_kernel, _woq_dot(), {**WOQ, "x_ptr": "*bf16"}, 4),
    ("woq dot int4 g32 fp16 3 groups a step, split, bias", _woq_dot_kernel,
     _woq_dot(MAGIC_BITS=0x6400, MAGIC_VALUE=1024.0, GROUP=32, BLOCK_N=64,
              GROUPS_PER_STEP=3, NUM_SPLITS=4, HAS_BIAS=True, DOT_DTYPE=tl.float16),
     {**WOQ, "x_ptr": "*fp16", "out_ptr": "*fp16", "bias_ptr": "*fp16", "s_ptr": "*fp16",
      "o_ptr": "*fp16"}, 4),
    ("row gemv fp8 dynamic", _fp8_row_gemv_kernel,
     _row(STATIC=False, EVEN_K=True), FP8, 4),
    ("row gemv fp8 dynamic, add + rms_norm before, rotary after", _fp8_row_gemv_kernel,
     _row(STATIC=False, EVEN_K=True, INPUT=1, HAS_RESIDUAL=True, ROTARY=True,
          HEAD_SIZE=128, X_BLOCK=1024), FP8, 4),
    ("row gemv fp8 dynamic, silu_and_mul before", _fp8_row_gemv_kernel,
     _row(STATIC=False, EVEN_K=True, INPUT=2, X_BLOCK=1024), FP8, 4),
    ("row gemv fp8 static, rms_norm before, split", _fp8_row_gemv_kernel,
     _row(STATIC=True, EVEN_K=True, INPUT=1, NUM_SPLITS=4), FP8, 4),
    ("row gemv fp8 static odd K split bias", _fp8_row_gemv_kernel,
     _row(STATIC=True, EVEN_K=False, NUM_SPLITS=4, HAS_BIAS=True), FP8, 4),
    ("row gemv fp8 dynamic, bit moves", _fp8_row_gemv_kernel,
     _row(STATIC=False, EVEN_K=True, ASM=False), FP8, 4),
    ("woq gemm int4 g128 bf16", _woq_gemm_kernel, _woq_gemm(tl.bfloat16), WOQ, 8),
    ("woq gemm int8 g32 fp16 16 rows", _woq_gemm_kernel,
     _woq_gemm(tl.float16, BITS=8, GROUP=32, BLOCK_M=16, BLOCK_N=64, BLOCK_K=64),
     {**WOQ, "x_ptr": "*fp16", "out_ptr": "*fp16", "bias_ptr": "*fp16"}, 4),
    ("woq gemm int4 g64 fp32 (ieee)", _woq_gemm_kernel,
     _woq_gemm(tl.float32, GROUP=64, BLOCK_M=32, BLOCK_N=64, BLOCK_K=64),
     {**WOQ, "x_ptr": "*fp32", "out_ptr": "*fp32", "bias_ptr": "*fp32", "s_ptr": "*fp32",
      "o_ptr": "*fp32"}, 4),
]

SAME_SQUARES: list[tuple[str, str, int, int]] = [
    ("*bf16", "*i8", 1024, 4), ("*fp32", "*fp8e4nv", 1024, 4), ("*fp32", "*i8", 1024, 4),
    ("*bf16", "*fp8e4nv", 1024, 2),
]
"""(x type, code type, BLOCK, warps) at which `_rms_norm_quant_kernel` must sum a row's
squares in `_rms_norm_kernel`'s layout (the same order, so the same inverse RMS bit for
bit): fp32 rows at 4 warps and 16-bit rows at 2 are where 1-byte code stores of the
row's shape would widen it."""


def _squares_layout(fn: Any, consts: dict[str, Any], types: dict[str, str], warps: int) -> str:
    """The layout `fn` reduces its `squares` in, compiled as launched on a row of 4096
    (pointers and integers divisible by 16)."""
    consts = {**consts, "PDL": True}
    attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names)
             if name not in consts and name != "eps"}
    compiled = triton.compile(ASTSource(fn, _signature(fn, consts, types), consts, attrs),
                              target=TARGET, options={"num_warps": warps})
    ir = compiled.asm["ttgir"]
    name = re.search(r'"tt\.reduce"\(%squares\).*?\}\) : \(tensor<\d+xf32, (#\w+)>\)', ir,
                     re.S).group(1)
    return re.search(rf"^{name} = (.*)$", ir, re.M).group(1)


def same_squares() -> int:
    for x, code, block, warps in SAME_SQUARES:
        label = f"sum of squares as rms_norm's: {x[1:]} rows to {code[1:]}, {block} x {warps} warps"
        types = {name: x for name in ("out_ptr", "sum_ptr", "x_ptr", "r_ptr", "w_ptr")}
        want = _squares_layout(_rms_norm_kernel, dict(HAS_RESIDUAL=True, BLOCK=block), types,
                               warps)
        got = _squares_layout(_rms_norm_quant_kernel, dict(INT8=code == "*i8", BLOCK=block,
                                                           EXACT=False),
                              {**types, "q_ptr": code, "s_ptr": "*fp32"}, warps)
        if got != want:
            print(f"FAILED {label}: {got}, not {want}")
            return 1
        print(f"ok {label}: {got}")
    return 0


def main() -> int:
    for label, fn, consts, types, warps in VARIANTS:
        if "PDL" in fn.arg_names:  # as launched on sm_90: waiting for the kernel before
            consts = {**consts, "PDL": True}
        start = time.perf_counter()
        try:
            compiled = triton.compile(ASTSource(fn, _signature(fn, consts, types), consts),
                                      target=TARGET, options={"num_warps": warps})
        except Exception as exc:
            print(f"FAILED {label}: {exc}")
            return 1
        print(f"ok {label}: {time.perf_counter() - start:.1f}s, "
              f"{compiled.metadata.shared} B shared, {compiled.metadata.num_warps} warps")
    return same_squares()


if __name__ == "__main__":
    sys.exit(main())
