"""Compile every Triton kernel variant for an H100/H200 (sm_90) without a GPU.

Run as a script in a process without TRITON_INTERPRET: Triton's compiler (ttir -> ptx ->
cubin through the bundled ptxas) needs no driver, and catches what the interpreter accepts
but a GPU rejects (dot shapes, loop-carried types, globals, register limits).
Prints one line per variant and exits non-zero on the first failure.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from pagoda.kernels.triton.activation import _gated_kernel
from pagoda.kernels.triton.attention_kernels import _attention_kernel, _reduce_splits_kernel
from pagoda.kernels.triton.gemv import _gemv_kernel, _sum_splits_kernel
from pagoda.kernels.triton.kv_cache import _write_kv_cache_kernel
from pagoda.kernels.triton.norm import _rms_norm_kernel
from pagoda.kernels.triton.rotary import _rotary_kernel
from pagoda.kernels.triton.sampling import _sample_kernel

TARGET = GPUTarget("cuda", 90, 32)
FLOATS = {"scale", "soft_cap", "eps"}
INDEX_PTRS = {"block_tables_ptr": "*i32", "query_start_loc_ptr": "*i32",
              "seq_lens_ptr": "*i32", "slot_mapping_ptr": "*i64", "positions_ptr": "*i64",
              "tokens_ptr": "*i64", "seeds_ptr": "*i64", "offsets_ptr": "*i64",
              "temperature_ptr": "*fp32"}


def _signature(fn: Any, data: str, consts: dict[str, Any], wide: set[str]) -> dict[str, str]:
    """Argument types as Triton's launcher would infer them: data pointers of type `data`
    (partials in float32), index pointers, float32 scalars, else int32; names in `wide`
    are int64 (index pointers to int64 too)."""
    sig = {}
    for name in fn.arg_names:
        if name in consts:
            sig[name] = "constexpr"
        elif name in INDEX_PTRS:
            sig[name] = "*i64" if name in wide else INDEX_PTRS[name]
        elif name.startswith("part_"):
            sig[name] = "*fp32"
        elif name.endswith("_ptr"):
            sig[name] = data
        elif name in FLOATS:
            sig[name] = "fp32"
        else:
            sig[name] = "i64" if name in wide else "i32"
    return sig


def _attention(dot: Any, **overrides: Any) -> dict[str, Any]:
    consts = dict(GROUP=4, GROUP_PAD=4, BLOCK_Q=16, BLOCK_M=64, HEAD_SIZE=128, HEAD_PAD=128,
                  BLOCK_SIZE=16, TILE_N=64, USE_WINDOW=False, USE_SOFT_CAP=False,
                  NUM_SPLITS=1, DOT_DTYPE=dot, KV_FP8=False, ONE_QUERY=False)
    consts.update(overrides)
    return consts


def _gemv(dot: Any, **overrides: Any) -> dict[str, Any]:
    consts = dict(BLOCK_M=1, BLOCK_N=8, BLOCK_K=512, EVEN_K=True, USE_DOT=False,
                  DOT_DTYPE=dot, HAS_BIAS=False, NUM_SPLITS=1, STAGES=3, INPUT=0,
                  HAS_RESIDUAL=False, NORM_BLOCK=1024, ROTARY=False, IS_NEOX=True, HEAD_SIZE=2)
    consts.update(overrides)
    return consts


VARIANTS: list[tuple[str, Any, str, dict[str, Any], set[str]]] = [
    ("attention bf16 prefill", _attention_kernel, "*bf16", _attention(tl.bfloat16), set()),
    ("attention bf16 decode split window softcap one-seq", _attention_kernel, "*bf16",
     _attention(tl.bfloat16, BLOCK_Q=4, BLOCK_M=16, NUM_SPLITS=8, USE_WINDOW=True,
                USE_SOFT_CAP=True, num_seqs=1),
     {"stride_cb", "query_start_loc_ptr", "seq_lens_ptr", "block_tables_ptr"}),
    ("attention bf16 decode one query a sequence", _attention_kernel, "*bf16",
     _attention(tl.bfloat16, BLOCK_Q=4, BLOCK_M=16, ONE_QUERY=True), set()),
    ("attention fp16 head 80 block 5 group 6", _attention_kernel, "*fp16",
     _attention(tl.float16, GROUP=6, GROUP_PAD=8, BLOCK_Q=8, HEAD_SIZE=80, BLOCK_SIZE=5), set()),
    ("attention fp32 (ieee dot)", _attention_kernel, "*fp32",
     _attention(tl.float32, HEAD_SIZE=64, HEAD_PAD=64), set()),
    ("reduce splits", _reduce_splits_kernel, "*bf16",
     dict(NUM_SPLITS=8, SPLITS_PAD=8, HEAD_SIZE=128, HEAD_PAD=128), set()),
    ("write_kv_cache", _write_kv_cache_kernel, "*bf16",
     dict(NUM_KV_HEADS=8, HEAD_SIZE=128, BLOCK_SIZE=16, HEADS_PAD=8, HEAD_PAD=128, FP8=False),
     {"stride_cb"}),
    ("rms_norm", _rms_norm_kernel, "*bf16", dict(HAS_RESIDUAL=False, BLOCK=4096), set()),
    ("fused_add_rms_norm", _rms_norm_kernel, "*bf16", dict(HAS_RESIDUAL=True, BLOCK=8192), set()),
    ("silu_and_mul", _gated_kernel, "*bf16", dict(ACT=0, BLOCK=1024), set()),
    ("gelu_and_mul", _gated_kernel, "*bf16", dict(ACT=1, BLOCK=1024), set()),
    ("gelu_and_mul tanh", _gated_kernel, "*fp16", dict(ACT=2, BLOCK=512), set()),
    ("sample bf16", _sample_kernel, "*bf16", dict(LANES=256), set()),
    ("sample fp32", _sample_kernel, "*fp32", dict(LANES=2), set()),
    ("rotary neox partial", _rotary_kernel, "*bf16",
     dict(NUM_HEADS=32, NUM_KV_HEADS=8, HEAD_SIZE=128, ROT_DIM=64, IS_NEOX=True, HEADS_PAD=32,
          KV_HEADS_PAD=8, HALF_PAD=32, HEAD_PAD=128), set()),
    ("rotary gptj", _rotary_kernel, "*fp32",
     dict(NUM_HEADS=6, NUM_KV_HEADS=1, HEAD_SIZE=80, ROT_DIM=80, IS_NEOX=False, HEADS_PAD=8,
          KV_HEADS_PAD=1, HALF_PAD=64, HEAD_PAD=128), set()),
    ("gemv bf16 1 row", _gemv_kernel, "*bf16", _gemv(tl.bfloat16), set()),
    ("gemv bf16 1 row, add + rms_norm before, neox rotary after", _gemv_kernel, "*bf16",
     _gemv(tl.bfloat16, INPUT=1, HAS_RESIDUAL=True, ROTARY=True, HEAD_SIZE=128), set()),
    ("gemv fp32 1 row, gptj rotary after, bias", _gemv_kernel, "*fp32",
     _gemv(tl.float32, ROTARY=True, IS_NEOX=False, HEAD_SIZE=64, HAS_BIAS=True), set()),
    ("gemv bf16 1 row, rms_norm before, split", _gemv_kernel, "*bf16",
     _gemv(tl.bfloat16, INPUT=1, NUM_SPLITS=4), set()),
    ("gemv fp32 1 row, silu_and_mul before, odd K", _gemv_kernel, "*fp32",
     _gemv(tl.float32, INPUT=2, EVEN_K=False, BLOCK_K=256, NORM_BLOCK=1024), set()),
    ("gemv fp16 4 rows odd K bias", _gemv_kernel, "*fp16",
     _gemv(tl.float16, BLOCK_M=4, BLOCK_K=256, EVEN_K=False, HAS_BIAS=True), set()),
    ("gemv bf16 dot 16-column tiles", _gemv_kernel, "*bf16",
     _gemv(tl.bfloat16, BLOCK_M=16, BLOCK_N=16, BLOCK_K=256, USE_DOT=True, STAGES=4), set()),
    ("gemv bf16 dot 64-column tiles split", _gemv_kernel, "*bf16",
     _gemv(tl.bfloat16, BLOCK_M=16, BLOCK_N=64, BLOCK_K=64, USE_DOT=True, NUM_SPLITS=4,
           STAGES=4), set()),
    ("gemv fp32 dot (ieee) odd K", _gemv_kernel, "*fp32",
     _gemv(tl.float32, BLOCK_M=16, BLOCK_N=16, BLOCK_K=128, USE_DOT=True, EVEN_K=False,
           STAGES=4), set()),
    ("gemv split sum", _sum_splits_kernel, "*bf16",
     dict(HAS_BIAS=True, NUM_SPLITS=4, BLOCK=1024), set()),
]


def main() -> int:
    for label, fn, data, consts, wide in VARIANTS:
        if "PDL" in fn.arg_names:  # as launched on sm_90: waiting for the kernel before
            consts = {**consts, "PDL": True}
        start = time.perf_counter()
        try:
            compiled = triton.compile(ASTSource(fn, _signature(fn, data, consts, wide), consts),
                                      target=TARGET)
        except Exception as exc:
            print(f"FAILED {label}: {exc}")
            return 1
        print(f"ok {label}: {time.perf_counter() - start:.1f}s, "
              f"{compiled.metadata.shared} B shared, {compiled.metadata.num_warps} warps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
