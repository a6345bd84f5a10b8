"""The gemv kernel (`pagoda.kernels.triton.gemv`) against torch's F.linear (cuBLAS) on
Llama-3-8B's matmul shapes at 1 to 16 rows, on one GPU; prints a table.

    python3 ci/gemv_bench.py [--rows 1 2 4 8 16] [--shapes qkv o gate_up down lm_head]
                             [--plans default|some|all] [--dtype bfloat16] [--json PATH]

Each (shape, rows, implementation) is timed as CUDA-graph replays of at least CALLS
launches that cycle through enough copies of the weight to overflow L2 several times, so
every launch streams its weight from HBM, as a model's layers do; the time is the median
replay over the launches in it (the gaps between launches included, as in the decode
graph). GB/s is weight bytes / time, x the speed-up over torch. Beside torch and the
kernel's own plan ("plan"), each alternative launch plan (`--plans some`, the default:
10 to 17 a shape; `all`: a wider grid of 100 to 200) is checked and timed, and the fastest
is shown ("best"), so one run says which tiles to make the default. Every output is checked against a float32 matmul of the same operands first;
a plan that does not match is reported and left out. Totals: one decode step of the 8B
model (32 x (qkv, o, gate_up, down) + lm_head).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import asdict, replace

import torch
import torch.nn.functional as F
import triton

from pagoda.kernels.triton.common import parallel_units, pow2
from pagoda.kernels.triton.gemv import GemvPlan, linear_with, num_k_splits, plan_gemv
from pagoda.testing.tolerances import TOLERANCES

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096),
          "down": (4096, 14336), "lm_head": (128256, 4096)}
"""Llama-3-8B: name -> (N, K) of the weight [N, K]."""
PER_STEP = {"qkv": 32, "o": 32, "gate_up": 32, "down": 32, "lm_head": 1}
CALLS = 20
REPLAYS = 7
L2_OVERFLOW = 4
"""Weight copies cycled per graph: together at least this many times the L2 cache."""
COPY_BYTES_PER_S = 4.24e12
"""The H200's measured device-to-device copy rate, the practical ceiling."""


SHARED_BYTES = 200_000
"""Most shared memory a plan's pipeline stages may take (the H200 has 227 KB a block)."""


def fma_plans(rows: int, grid: bool) -> list[tuple[int, int, int, int]]:
    """(BLOCK_N, BLOCK_K, warps, stages) of the register path: at most 128 accumulators a
    thread, and the stages' tiles within SHARED_BYTES."""
    if grid:
        shapes = [(bn, bk, w, s) for bn in (2, 4, 8, 16) for bk in (256, 512, 1024, 2048)
                  for w in (2, 4, 8) for s in (1, 3, 5)]
    else:
        shapes = [(8, 512, 4, 1), (8, 512, 4, 4), (4, 1024, 4, 3), (8, 256, 4, 4),
                  (8, 1024, 8, 3), (16, 512, 8, 3)]
    bm = pow2(rows)
    return [(bn, bk, w, s) for bn, bk, w, s in shapes
            if bn * bm * bk <= 128 * 32 * w and (bn + bm) * bk * 2 * s <= SHARED_BYTES]


def dot_plans(grid: bool) -> list[tuple[int, int, int, int]]:
    """(BLOCK_N, BLOCK_K, warps, stages) of the tl.dot path, within SHARED_BYTES."""
    if grid:
        shapes = [(bn, bk, w, s) for bn in (16, 32, 64, 128) for bk in (64, 128, 256, 512)
                  for w in (4, 8) for s in (3, 4, 6)]
    else:
        shapes = [(16, 256, 4, 4), (16, 256, 4, 6), (16, 512, 4, 4), (32, 128, 4, 4),
                  (32, 256, 4, 4), (64, 64, 4, 6), (64, 128, 4, 4), (128, 64, 4, 4),
                  (128, 128, 8, 4)]
    return [p for p in shapes if (p[0] + 16) * p[1] * 2 * p[3] <= SHARED_BYTES]


def plans(rows: int, n: int, k: int, units: int, which: str) -> list[GemvPlan]:
    """The kernel's own plan first, then the alternatives (each with the split rule)."""
    own = plan_gemv(rows, n, k, units)
    found = [own]
    if which != "default":
        grid = which == "all"
        found += [GemvPlan(bn, bk, False, num_k_splits(triton.cdiv(n, bn), k, units), w, s)
                  for bn, bk, w, s in fma_plans(rows, grid)]
        found += [GemvPlan(bn, bk, True, num_k_splits(triton.cdiv(n, bn), k, units), w, s)
                  for bn, bk, w, s in dot_plans(grid)]
        found += [replace(own, num_splits=s) for s in (1, 2, 4)]
    return list(dict.fromkeys(found))


def graph_seconds(call, weights: list[torch.Tensor]) -> float:
    """Seconds per call: median replay of a graph of max(CALLS, copies) calls over `weights`."""
    calls = max(CALLS, len(weights))
    for w in weights:
        call(w)  # compiles, and sets up libraries, outside the graph
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            call(weights[i % len(weights)])
    graph.replay()
    times = []
    for _ in range(REPLAYS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    del graph
    return statistics.median(times)


def mismatch(got: torch.Tensor, want: torch.Tensor) -> str | None:
    tol = TOLERANCES[got.dtype]
    err = (got.float() - want).abs() - tol.rtol * want.abs()
    worst = err.max().item()
    return None if worst <= tol.atol else f"off by {worst:.3g} beyond rtol"


def bench_shape(name: str, rows: int, dtype: torch.dtype, device: torch.device, units: int,
                l2: int, which: str) -> dict:
    n, k = SHAPES[name]
    gen = torch.Generator(device=device).manual_seed(rows)
    weight = (torch.randn(n, k, device=device, generator=gen) * k**-0.5).to(dtype)
    x = torch.randn(rows, k, device=device, generator=gen).to(dtype)
    want = x.float() @ weight.float().T
    weight_bytes = weight.numel() * weight.element_size()
    copies = [weight] + [weight.clone() for _ in range(math.ceil(L2_OVERFLOW * l2 / weight_bytes)
                                                       - 1)]
    result = {"shape": name, "n": n, "k": k, "rows": rows, "bytes": weight_bytes,
              "copies": len(copies), "plans": []}
    torch_error = mismatch(F.linear(x, weight), want)
    result["torch_s"] = graph_seconds(lambda w: F.linear(x, w), copies)
    result["torch_error"] = torch_error
    for plan in plans(rows, n, k, units, which):
        entry = {"plan": plan.label, **asdict(plan)}
        try:
            entry["error"] = mismatch(linear_with(x, weight, None, plan), want)
            if entry["error"] is None:
                entry["seconds"] = graph_seconds(lambda w, p=plan: linear_with(x, w, None, p),
                                                 copies)
        except Exception as exc:  # e.g. out of shared memory: report, keep going
            entry["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
        result["plans"].append(entry)
    del copies, weight, want
    torch.cuda.empty_cache()
    return result


def rate(weight_bytes: int, seconds: float) -> str:
    return f"{seconds * 1e6:8.1f} {weight_bytes / seconds / 1e9:6.0f}"


def report(results: list[dict]) -> None:
    print(f"\n{'shape':8} {'rows':>4} {'torch us':>8} {'GB/s':>6} | {'plan us':>8} {'GB/s':>6} "
          f"{'x':>5} | {'best us':>8} {'GB/s':>6} {'x':>5}  best plan / own plan")
    totals: dict[int, list[float]] = {}
    for r in results:
        timed = [p for p in r["plans"] if "seconds" in p]
        own = r["plans"][0]
        best = min(timed, key=lambda p: p["seconds"]) if timed else None
        own_s = own.get("seconds", math.nan)
        best_s = best["seconds"] if best else math.nan
        line = (f"{r['shape']:8} {r['rows']:4} {rate(r['bytes'], r['torch_s'])} | "
                f"{rate(r['bytes'], own_s)} {r['torch_s'] / own_s:5.2f} | "
                f"{rate(r['bytes'], best_s)} {r['torch_s'] / best_s:5.2f}  "
                f"{best['plan'] if best else '-'} / {own['plan']}")
        print(line)
        for p in r["plans"]:
            if p["error"]:
                print(f"{'':15} {p['plan']}: {p['error']}")
        if r["torch_error"]:
            print(f"{'':15} torch: {r['torch_error']}")
        step = totals.setdefault(r["rows"], [0.0, 0.0, 0.0])
        weight = PER_STEP[r["shape"]]
        for i, seconds in enumerate((r["torch_s"], own_s, best_s)):
            step[i] += weight * seconds
    if {r["shape"] for r in results} == set(SHAPES):
        step_bytes = sum(PER_STEP[s] * n * k * 2 for s, (n, k) in SHAPES.items())
        print(f"\n8B decode step, matmuls only (streaming the bf16 weights once at "
              f"{COPY_BYTES_PER_S / 1e12:.2f} TB/s: {step_bytes / COPY_BYTES_PER_S * 1e3:.2f} ms)")
        for rows, (t, own, best) in sorted(totals.items()):
            print(f"  rows {rows:2}: torch {t * 1e3:.3f} ms, plan {own * 1e3:.3f} ms "
                  f"({t / own:.2f}x), best per shape {best * 1e3:.3f} ms ({t / best:.2f}x)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    parser.add_argument("--plans", choices=("default", "some", "all"), default="some")
    parser.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16")
    parser.add_argument("--json", help="write every measurement here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("gemv_bench needs a CUDA GPU")
        return 1
    device = torch.device("cuda", torch.cuda.current_device())
    props = torch.cuda.get_device_properties(device)
    units, l2 = parallel_units(device), props.L2_cache_size
    print(f"{props.name}: {units} SMs, L2 {l2 / 2**20:.0f} MiB; torch {torch.__version__}, "
          f"triton {triton.__version__}; {args.dtype}, plans: {args.plans}")
    dtype = getattr(torch, args.dtype)
    results = []
    for rows in args.rows:
        for name in args.shapes:
            results.append(bench_shape(name, rows, dtype, device, units, l2, args.plans))
            r = results[-1]
            own = r["plans"][0]
            print(f"  {name} x{rows}: torch {r['torch_s'] * 1e6:.1f} us, plan "
                  f"{own.get('seconds', math.nan) * 1e6:.1f} us, {len(r['plans'])} plans",
                  flush=True)
    report(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": props.name, "dtype": args.dtype, "results": results}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
