"""The batched LoRA kernels at the 8B shape's layers, beside the base layer's matmul: where
benchmark L's loss goes.

    python ci/bench_lora_kernels.py [--tokens 256 1024 8192] [--adapters 8] [--rank 16]
        [--json OUT.json]

For each linear layer of a Llama-3-8B decoder layer (qkv and gate/up merged, as Pagoda holds
them: their adapters' ranks stacked) and each step size, the step's tokens spread round-robin
over the adapters: device time of `lora_shrink` (and of it with K whole: one program a
tile), of `lora_expand`, and of the base layer's
bf16 matmul (torch), each the median of 5 replays of a CUDA graph of 20 calls; the bytes
each LoRA kernel must move at least, and the bandwidth that makes. The last column is the
share LoRA adds to the layer.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable

import numpy as np
import torch

from pagoda.kernels.triton.lora import _num_tiles, lora_expand, lora_shrink, shrink_splits
from pagoda.ops.lora_reference import group_by_slot

LAYERS = {  # name: (in features, out features, parts of the merged layer)
    "qkv_proj": (4096, 6144, 3), "o_proj": (4096, 4096, 1),
    "gate_up_proj": (4096, 28672, 2), "down_proj": (14336, 4096, 1)}
CALLS = 20


def device_us(fn: Callable[[], object]) -> float:
    """Median device time of one call of `fn` in µs (a graph of CALLS calls, replayed)."""
    fn()  # compile
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS):
            fn()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / CALLS)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[64, 256, 1024, 8192])
    parser.add_argument("--adapters", type=int, default=8)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    device, dtype = torch.device("cuda"), torch.bfloat16
    rows = []
    header = (f"{'layer':>13} {'T':>5} {'splits':>6} {'shrink us':>9} {'GB/s':>6} {'unsplit':>7} "
              f"{'expand us':>9} {'GB/s':>6} {'base us':>8} {'LoRA/base':>9}")
    print(header)
    for tokens in args.tokens:
        slots = np.arange(tokens, dtype=np.int32) % args.adapters
        order, tiles = group_by_slot(slots, args.adapters)
        slots_d = torch.from_numpy(slots).to(device)
        order_d, tiles_d = torch.from_numpy(order).to(device), torch.from_numpy(tiles).to(device)
        for name, (k, n, parts) in LAYERS.items():
            rank = parts * args.rank
            x = torch.randn(tokens, k, device=device, dtype=dtype)
            weight = torch.randn(n, k, device=device, dtype=dtype) * k**-0.5
            a = torch.randn(args.adapters, rank, k, device=device, dtype=dtype) * k**-0.5
            b = torch.randn(args.adapters, rank, n, device=device, dtype=dtype) * 0.01
            y = x @ weight.T
            h = lora_shrink(x, a, slots_d, order_d, tiles_d)
            shrink = device_us(lambda: lora_shrink(x, a, slots_d, order_d, tiles_d))  # noqa: B023
            whole = device_us(lambda: lora_shrink(x, a, slots_d, order_d, tiles_d,  # noqa: B023
                                                  num_splits=1))
            expand = device_us(lambda: lora_expand(y, h, b, slots_d, order_d, tiles_d))  # noqa: B023
            base = device_us(lambda: x @ weight.T)  # noqa: B023
            num_tiles = _num_tiles(tokens, args.adapters, tiles_d)
            # At least: x and each tile's slot's A (shrink); y in, out, and B per tile (expand).
            shrink_bytes = 2 * (tokens * k + num_tiles * rank * k + tokens * rank)
            expand_bytes = 2 * (2 * tokens * n + num_tiles * rank * n + tokens * rank)
            row = {"layer": name, "tokens": tokens,
                   "splits": shrink_splits(num_tiles, k, device),
                   "shrink_us": shrink, "shrink_GBps": shrink_bytes / shrink / 1e3,
                   "shrink_unsplit_us": whole,
                   "expand_us": expand, "expand_GBps": expand_bytes / expand / 1e3,
                   "base_us": base, "lora_over_base": (shrink + expand) / base}
            rows.append(row)
            print(f"{name:>13} {tokens:>5} {row['splits']:>6} {shrink:9.1f} "
                  f"{row['shrink_GBps']:6.0f} {whole:7.1f} {expand:9.1f} {row['expand_GBps']:6.0f} "
                  f"{base:8.1f} {row['lora_over_base']:9.3f}")
    for tokens in args.tokens:
        mine = [r for r in rows if r["tokens"] == tokens]
        lora = sum(r["shrink_us"] + r["expand_us"] for r in mine)
        base = sum(r["base_us"] for r in mine)
        print(f"T={tokens}: a decoder layer's linears {base:.0f} us, LoRA adds {lora:.0f} us "
              f"({lora / base:.1%})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"adapters": args.adapters, "rank": args.rank, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
