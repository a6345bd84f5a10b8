"""Check an implementation of a collective op (`all_reduce`) on several ranks.

A collective means nothing on one process, so the check spawns `world_size` processes,
joined by torch.distributed over the platform's collective backend, rank r driving the
platform's device r (as workers do: `Platform.init_worker`). On every case each rank draws every rank's input from the seed (so
each knows the exact sum), runs the implementation and the reference on copies of its
own, and compares both with the sum; rank 0 reports.
"""

from __future__ import annotations

import multiprocessing
import socket
import traceback
from typing import Any

import torch

from pagoda.plugins.lazy import Target, load_target
from pagoda.testing.report import ConformanceReport
from pagoda.testing.tolerances import TOLERANCES, dtype_name, mismatch

COLLECTIVE_OPS = ("all_reduce",)
ALL_REDUCE_SHAPES = ((1,), (7, 64), (33, 4096), (2, 3, 129))
"""One element, a few rows, a large message, an odd 3-D shape."""

TIMEOUT_S = 300


def _inputs(shape: tuple[int, ...], rank: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed * 1000 + rank * 7 + len(shape))
    return torch.randn(shape, generator=gen).to(dtype)


def _rank_main(rank: int, world_size: int, address: str, platform_name: str, impl: Target,
               dtype_str: str, seed: int, queue: Any) -> None:
    import torch.distributed as dist

    from pagoda.ops import reference
    from pagoda.platforms import resolve_platform

    dtype = getattr(torch, dtype_str)
    checked: list[str] = []
    failures: list[str] = []
    try:
        platform = resolve_platform(platform_name)
        platform.init_worker(rank, world_size)
        device = platform.torch_device(rank)
        dist.init_process_group(platform.distributed_backend, init_method=address,
                                world_size=world_size, rank=rank)
        fn = load_target(impl)
        for shape in ALL_REDUCE_SHAPES:
            label = f"x{list(shape)} over {world_size} ranks"
            parts = [_inputs(shape, r, dtype, seed) for r in range(world_size)]
            exact = torch.stack([p.double() for p in parts]).sum(0)
            want = reference.all_reduce(parts[rank].clone().to(device), dist.group.WORLD)
            try:
                got = fn(parts[rank].clone().to(device), dist.group.WORLD)
            except Exception as exc:
                failures.append(f"{label}: raised {exc!r}")
                continue
            problems = [m for name, value in (("output", got), ("reference", want))
                        if (m := mismatch(name, value.cpu() if isinstance(value, torch.Tensor)
                                          else value, exact.to(dtype), TOLERANCES[dtype]))]
            if problems:
                failures.append(f"{label}: " + "; ".join(problems))
            else:
                checked.append(label)
        dist.destroy_process_group()
    except Exception:
        failures.append(f"rank {rank} failed: {traceback.format_exc(limit=-3)}")
    if rank == 0 or failures:
        queue.put((rank, checked, failures))


def check_collective(
    op: str,
    impl: Target,
    dtype: torch.dtype,
    *,
    platform: str = "cpu",
    world_size: int = 2,
    seed: int = 0,
    subject: str | None = None,
) -> ConformanceReport:
    """Run `impl` (an importable "module:function") on `world_size` ranks of `platform`,
    a process each, on every case of `op`."""
    if op not in COLLECTIVE_OPS:
        raise KeyError(f"{op!r} is not a collective op ({', '.join(COLLECTIVE_OPS)})")
    report = ConformanceReport(subject or f"{op} in {dtype_name(dtype)} (seed {seed})")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    processes = [ctx.Process(target=_rank_main, daemon=True,
                             args=(rank, world_size, address, platform, impl,
                                   dtype_name(dtype), seed, queue))
                 for rank in range(world_size)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(TIMEOUT_S)
        if process.is_alive():
            process.kill()
            report.failures.append(f"a rank did not finish in {TIMEOUT_S} s (a hang)")
    while not queue.empty():
        rank, checked, failures = queue.get()
        report.failures.extend(failures)
        if rank == 0:
            report.checked.extend(checked)
    if not report.checked and not report.failures:
        report.failures.append("no rank reported (they died before reporting)")
    return report
