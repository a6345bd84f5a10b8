"""Compile the mixture-of-experts kernels' variants for an H100/H200 (sm_90) without a GPU,
as `compile_sm90.py` does for the others: every tile plan `plan_moe` can choose, in bf16
and float32, the alignment kernels and the final sum. Run as a script without
TRITON_INTERPRET; one line per variant, non-zero exit on the first failure.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from pagoda.kernels.triton.moe import (
    _moe_down_kernel,
    _moe_gate_up_kernel,
    _moe_sum_kernel,
    plan_moe,
)
from pagoda.kernels.triton.moe_align import (
    ALIGN_WARPS,
    _align_count_kernel,
    _align_one_kernel,
    _align_scan_kernel,
    _align_scatter_kernel,
    chunk_size,
)

TARGET = GPUTarget("cuda", 90, 32)
INDEX = {"sorted_ptr": "*i32", "start_ptr": "*i32", "count_ptr": "*i32", "chunk_ptr": "*i32",
         "ids_ptr": "*i64", "weights_ptr": "*fp32"}


ALIGNED = ("H", "INTER")
"""Integer arguments that are multiples of 16 in the models (Triton specializes such
arguments at launch; without the hint loads are not vectorized and nothing pipelines)."""


def _signature(fn: Any, data: str, consts: dict[str, Any]) -> dict[str, str]:
    return {name: "constexpr" if name in consts else
            INDEX.get(name, data if name.endswith("_ptr") else "i32")
            for name in fn.arg_names}


def _aligned(fn: Any) -> dict[tuple[int, ...], list[list[Any]]]:
    """Divisibility by 16 of every pointer, stride and model size, as at a real launch."""
    return {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names)
            if name.endswith("_ptr") or name.startswith("stride") or name in ALIGNED}


def _variants() -> list[tuple[str, Any, str, dict[str, Any], int]]:
    variants = []
    # (pairs, experts) of Qwen3-30B-A3B: one token, decode batches of 256, 512 and 1000,
    # a prefill chunk (every row block plan_moe chooses)
    for pairs, experts in ((8, 128), (2048, 128), (4096, 128), (8000, 128), (65536, 128)):
        for data, dot, itemsize in (("*bf16", tl.bfloat16, 2), ("*fp32", tl.float32, 4)):
            plan = plan_moe(pairs, experts, itemsize)
            common = dict(E_PAD=128, BLOCK_M=plan.block_m, GROUP_M=plan.group_m,
                          DOT_DTYPE=dot)
            g, d = plan.gate_up, plan.down
            label = f"{pairs} pairs {data[1:]} m{plan.block_m}"
            variants.append((f"gate_up {label} n{g.block_n} k{g.block_k}", _moe_gate_up_kernel,
                             data, dict(common, TOP_K=8, BLOCK_N=g.block_n, BLOCK_K=g.block_k,
                                        num_stages=g.num_stages), g.num_warps))
            variants.append((f"down {label} n{d.block_n} k{d.block_k}", _moe_down_kernel, data,
                             dict(common, BLOCK_N=d.block_n, BLOCK_K=d.block_k,
                                  num_stages=d.num_stages), d.num_warps))
    chunk = chunk_size(128)
    variants += [
        ("align one program", _align_one_kernel, "*i32",
         dict(CHUNK=chunk, E_PAD=128, BLOCK_M=16), ALIGN_WARPS),
        ("align count", _align_count_kernel, "*i32", dict(CHUNK=chunk, E_PAD=128), ALIGN_WARPS),
        ("align scan", _align_scan_kernel, "*i32", dict(E_PAD=128, ROWS=128, BLOCK_M=64),
         ALIGN_WARPS),
        ("align scatter", _align_scatter_kernel, "*i32", dict(CHUNK=chunk, E_PAD=128),
         ALIGN_WARPS),
        ("sum top-8", _moe_sum_kernel, "*bf16", dict(TOP_K=8, BLOCK=1024), 4),
    ]
    return variants


def main() -> int:
    for label, fn, data, consts, warps in _variants():
        stages = consts.pop("num_stages", 3)
        start = time.perf_counter()
        try:
            source = ASTSource(fn, _signature(fn, data, consts), consts, attrs=_aligned(fn))
            compiled = triton.compile(source, target=TARGET,
                                      options={"num_warps": warps, "num_stages": stages})
        except Exception as exc:
            print(f"FAILED {label}: {exc}")
            return 1
        print(f"ok {label}: {time.perf_counter() - start:.1f}s, "
              f"{compiled.metadata.shared} B shared, {compiled.metadata.num_warps} warps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
