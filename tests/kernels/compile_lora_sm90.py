"""Compile the LoRA kernels' variants for an H100/H200 (sm_90) without a GPU, as
`compile_sm90.py` does for the others: shrink (K whole and split) and expand, bf16 and
float32, a tile's rows 16 and 64 at a time, ranks of one slot part (16) and of a merged
layer's three (64). Run as a script without TRITON_INTERPRET; one line per variant, non-zero
exit on the first failure.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from pagoda.kernels.triton.lora import BLOCK_K, BLOCK_N, _lora_expand_kernel, _lora_shrink_kernel
from pagoda.ops.lora_reference import LORA_TILE

TARGET = GPUTarget("cuda", 90, 32)


def _signature(fn: Any, data: str, consts: dict[str, Any]) -> dict[str, str]:
    return {name: "constexpr" if name in consts else
            "*i32" if name in ("order_ptr", "tiles_ptr") else "*fp32" if name == "part_ptr"
            else data if name.endswith("_ptr") else "i32"
            for name in fn.arg_names}


def _aligned(fn: Any) -> dict[tuple[int, ...], list[list[Any]]]:
    return {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names)
            if name.endswith("_ptr") or name.startswith("stride")}


def main() -> int:
    count = 0
    for data, dot in (("*bf16", tl.bfloat16), ("*fp32", tl.float32)):
        for block_t in (16, 64):
            for block_r in (16, 64):
                for name, fn, tile in (
                        ("shrink (any number of splits)", _lora_shrink_kernel,
                         {"BLOCK_K": BLOCK_K}),
                        ("expand", _lora_expand_kernel, {"BLOCK_N": BLOCK_N})):
                    consts = dict(TILE=LORA_TILE, BLOCK_T=block_t, BLOCK_R=block_r,
                                  DOT_DTYPE=dot, **tile)
                    label = f"{name} {data[1:]} t{block_t} r{block_r}"
                    start = time.perf_counter()
                    try:
                        triton.compile(ASTSource(fn, _signature(fn, data, consts), consts,
                                                 attrs=_aligned(fn)), target=TARGET)
                    except Exception as exc:
                        print(f"FAILED {label}: {exc}")
                        return 1
                    count += 1
                    print(f"ok {label}: {time.perf_counter() - start:.1f}s")
    return 0 if count else 1


if __name__ == "__main__":
    sys.exit(main())
