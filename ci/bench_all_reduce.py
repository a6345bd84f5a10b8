"""The all-reduce of tensor parallelism across this host's GPUs, per message size: NCCL
through torch.distributed (what Pagoda's layers call by default) beside PyTorch's
symmetric-memory one-shot (each GPU reads every peer's whole message over NVLink and sums)
and two-shot (each sums a slice, then gathers) all-reduces, and pagoda-cuda's all-reduce
(`pagoda_cuda.all_reduce`: one-shot up to its size limit, NCCL above), each launched
eagerly and replayed from a CUDA graph (a decode step's graph would hold it), one process
per GPU.

    python ci/bench_all_reduce.py [--gpus N] [--output-json FILE]

Messages are a step's activations in bf16: 1 to 8192 tokens of the 8B (4096) and 70B (8192)
hidden sizes. Bus bandwidth = 2 (n - 1) / n x bytes / time (NCCL's convention). Each
result is checked against the exact sum first. NVLink multicast stays off (the machines'
rule: NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1), so no multimem path.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

TOKENS = (1, 8, 64, 256, 1024, 8192)
HIDDEN = (4096, 8192)
ITERS = 20


def _time(fn, iters: int) -> float:
    """Seconds per call of `fn` (already warmed up), from CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def _paths() -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """Name -> all-reduce of a [tokens, hidden] bf16 tensor, returning the sum (NCCL's in
    place; the symmetric-memory ones through a buffer every rank mapped, where PyTorch
    has it and the GPUs reach each other)."""
    paths: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "nccl": lambda x: dist.all_reduce(x) or x}
    try:
        import torch.distributed._symmetric_memory as symm_mem

        group = dist.group.WORLD.group_name
        buffer = symm_mem.empty(max(TOKENS) * max(HIDDEN), dtype=torch.bfloat16, device="cuda")
        symm_mem.rendezvous(buffer, group)
    except Exception as e:  # noqa: BLE001 - no symmetric memory here: NCCL alone
        print(f"symmetric memory: not timed ({type(e).__name__}: {e})")
        return paths
    ops = torch.ops.symm_mem

    def staged(x: torch.Tensor) -> torch.Tensor:
        return buffer[:x.numel()].view_as(x)

    paths["symm one-shot"] = lambda x: ops.one_shot_all_reduce_copy(staged(x), x, "sum", group)

    def two_shot(x: torch.Tensor) -> torch.Tensor:
        staged(x).copy_(x)
        return ops.two_shot_all_reduce_(staged(x), "sum", group)

    paths["symm two-shot"] = two_shot
    try:  # what the engine runs with PAGODA_CUDA_SYMM_ALL_REDUCE=1: one-shot up to its limit
        from pagoda_cuda.all_reduce import all_reduce
    except ImportError:
        return paths
    paths["pagoda_cuda"] = lambda x: all_reduce(x, dist.group.WORLD)
    return paths


def _rank(rank: int, world: int, address: str, queue) -> None:
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=address, world_size=world, rank=rank,
                            device_id=torch.device("cuda", rank))
    paths = _paths()
    rows = []
    for hidden in HIDDEN:
        for tokens in TOKENS:
            x = torch.full((tokens, hidden), float(rank + 1), dtype=torch.bfloat16,
                           device="cuda")
            size = x.numel() * x.element_size()
            bus = 2 * (world - 1) / world * size
            row = {"benchmark": f"Z all-reduce {tokens}x{hidden} bf16 over {world} GPUs",
                   "bytes": size}
            for name, reduce in paths.items():
                try:  # a size a path refuses: its checks refuse it on every rank alike
                    got = reduce(x.clone())
                except (RuntimeError, ValueError) as e:
                    row[f"{name} refused"] = str(e).splitlines()[0][:120]
                    continue
                assert torch.all(got == world * (world + 1) / 2), f"{name}: wrong sum"
                work = x.clone()
                eager = _time(lambda reduce=reduce, work=work: reduce(work), ITERS)
                stream = torch.cuda.Stream()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.stream(stream):
                    reduce(work)  # warm-up on the capturing stream
                torch.cuda.synchronize()
                with torch.cuda.graph(graph, stream=stream):
                    for _ in range(ITERS):
                        reduce(work)
                graphed = _time(graph.replay, 3) / ITERS
                row |= {f"{name} eager us": 1e6 * eager, f"{name} in graph us": 1e6 * graphed,
                        f"{name} bus GB/s (graph)": bus / graphed / 1e9}
                del graph
            rows.append(row)
    if rank == 0:
        queue.put(rows)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=torch.cuda.device_count())
    parser.add_argument("--output-json")
    args = parser.parse_args()
    if args.gpus < 2:
        raise SystemExit(f"needs two or more GPUs, {args.gpus} visible")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    mp.start_processes(_rank, args=(args.gpus, address, queue), nprocs=args.gpus,
                       start_method="spawn")
    rows = queue.get(timeout=60)
    for row in rows:
        print(" | ".join(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}"
                         for k, v in row.items()))
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
