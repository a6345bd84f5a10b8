"""The paged attention kernel (`pagoda.kernels.triton.attention.paged_attention`) on one GPU
at the 8B shape (32 query heads, 8 kv heads, head size 128, cache blocks of 16 tokens), with
a bf16 and an fp8 KV cache, under several launches; prints µs a call and the KV cache's
bytes read a second, writes JSON.

    python3 ci/bench_attention_kernels.py [--cases decode-1000x192 ...] [--json PATH]

Cases: decode-1000x192 (a decode step of workload A: 1000 sequences, 192 tokens of
context), decode-64x1024, decode-1x4096 (workload C's, its keys split across programs as
the backend splits them), prefill-64x128 (a prefill step of 64 prompts of 128 tokens).
Blocks are spread at random over a cache twice the case's size, as a long-running
server's are. Every output is first checked against `pagoda.attention.reference`
within the bf16 tolerance (fp8: the reference reads the same fp8 cache); a launch that
does not match is reported and not timed. Times are CUDA-graph replays of 20 calls,
median of 10 (`gemv_bench.graph_seconds`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from gemv_bench import graph_seconds  # noqa: E402

from pagoda.attention import reference  # noqa: E402
from pagoda.attention.backend import FP8_KV_CACHE_DTYPE  # noqa: E402
from pagoda.kernels.triton.attention import TILE_N, num_kv_splits, paged_attention  # noqa: E402
from pagoda.kernels.triton.launch import LaunchParams, TritonLaunch  # noqa: E402
from pagoda.testing.tolerances import TOLERANCES, mismatch  # noqa: E402

HEADS, KV_HEADS, HEAD_SIZE, BLOCK = 32, 8, 128, 16
CASES = {"decode-1000x192": (1000, 192, 1), "decode-64x1024": (64, 1024, 1),
         "decode-1x4096": (1, 4096, 1), "prefill-64x128": (64, 128, 128)}
"""name -> (sequences, tokens of each sequence including its queries, queries a sequence)."""
LAUNCHES = ((TILE_N, None, None, None), (32, 2, 2, None), (64, 2, 2, None), (64, 2, 2, 128),
            (32, 4, 2, None), (64, 4, 2, None), (64, 4, 3, None), (64, 4, 4, None),
            (64, 8, 2, None), (64, 8, 3, None), (128, 4, 2, None), (128, 8, 2, None),
            (128, 8, 3, None))
"""(keys a tile, warps, stages, most registers a thread) tried; None keeps Triton's default.
(64, 2, 2, 128) is pagoda-cuda's launch of decode steps over an fp8 cache."""


def case_inputs(seqs: int, seq_len: int, q_len: int, kv_dtype: torch.dtype,
                gen: torch.Generator) -> dict[str, Any]:
    """Query, cache, block tables and lengths of one case on the GPU."""
    width = -(-seq_len // BLOCK)
    blocks = 2 * seqs * width
    cache = torch.randn(2, blocks, BLOCK, KV_HEADS, HEAD_SIZE, device="cuda", generator=gen)
    scales = None
    if kv_dtype == FP8_KV_CACHE_DTYPE:
        scales = torch.tensor([0.5, 0.25], device="cuda")
        cache = (cache * 4).to(kv_dtype)  # stored = cached / scale, within e4m3's range
    else:
        cache = cache.to(kv_dtype)
    order = torch.randperm(blocks, device="cuda", generator=gen)[: seqs * width]
    return {
        "query": torch.randn(seqs * q_len, HEADS, HEAD_SIZE, device="cuda", generator=gen
                             ).bfloat16(),
        "kv_cache": cache,
        "block_tables": order.view(seqs, width).int(),
        "query_start_loc": torch.arange(0, seqs * q_len + 1, q_len, device="cuda",
                                        dtype=torch.int32),
        "seq_lens": torch.full((seqs,), seq_len, device="cuda", dtype=torch.int32),
        "scale": HEAD_SIZE**-0.5,
        "kv_scales": scales,
    }


def bench(name: str, kv_dtype: torch.dtype, gen: torch.Generator) -> list[dict[str, Any]]:
    seqs, seq_len, q_len = CASES[name]
    inputs = case_inputs(seqs, seq_len, q_len, kv_dtype, gen)
    want = reference.paged_attention(**inputs)
    cache = inputs["kv_cache"]
    kv_bytes = seqs * seq_len * 2 * KV_HEADS * HEAD_SIZE * cache.element_size()
    splits = num_kv_splits(seqs, KV_HEADS, q_len, seq_len, cache.device)
    rows = []
    for tile_n, warps, stages, maxnreg in LAUNCHES:
        launch = TritonLaunch(attention=LaunchParams(warps, stages, maxnreg))

        def call(_: Any, launch: TritonLaunch = launch, tile_n: int = tile_n) -> torch.Tensor:
            return paged_attention(**inputs, max_query_len=q_len, num_splits=splits,
                                   tile_n=tile_n, launch=launch)

        label = f"tile {tile_n} w{warps or '-'} s{stages or '-'} r{maxnreg or '-'}"
        row = {"case": name, "kv": str(kv_dtype).removeprefix("torch."), "launch": label,
               "splits": splits, "bytes": kv_bytes, "seconds": float("nan")}
        try:
            row["error"] = mismatch("output", call(None), want, TOLERANCES[torch.bfloat16])
            if row["error"] is None:
                row["seconds"] = graph_seconds(call, [cache])
        except Exception as exc:  # report, keep going
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
        rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--json", help="write every measurement here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_attention_kernels needs a CUDA GPU")
        return 1
    print(torch.cuda.get_device_name())
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for name in args.cases:
        for kv_dtype in (torch.bfloat16, FP8_KV_CACHE_DTYPE):
            rows += bench(name, kv_dtype, gen)
            torch.cuda.empty_cache()
    print(f"\n{'case':16} {'kv':14} {'launch':18} {'splits':>6} {'us':>9} {'TB/s':>6}")
    for r in rows:
        s = r["seconds"]
        print(f"{r['case']:16} {r['kv']:14} {r['launch']:18} {r['splits']:6} {s * 1e6:9.1f} "
              f"{r['bytes'] / s / 1e12:6.2f}" + (f"  MISMATCH {r['error']}" if r["error"] else ""))
    if args.json:
        Path(args.json).write_text(json.dumps({"device": torch.cuda.get_device_name(),
                                               "results": rows}, indent=1))
    return 1 if any(r["error"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
