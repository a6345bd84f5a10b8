"""pagoda-cuda's all-reduce over symmetric memory (`pagoda_cuda.all_reduce`), what runs
without GPUs: on two CPU ranks over gloo, every message goes to the collective backend and
sums exactly; the ranks agree on whether a group gets its buffer, whichever rank fails to
set it up, and never wait in an exchange a peer skipped. (The one-shot kernel itself runs
in `bash ci/gpu.sh multigpu`: the conformance kit and the tensor-parallel tests.)"""

from __future__ import annotations

import multiprocessing
import socket
from typing import Any

import pytest
import torch
import torch.distributed as dist

from pagoda.testing.collective_conformance import ALL_REDUCE_SHAPES, check_collective

pytest.importorskip("pagoda_cuda", reason="pagoda-cuda is not installed")

from pagoda_cuda import all_reduce as symm  # noqa: E402

HERE = "tests.platforms.cuda.test_cuda_all_reduce"


def test_off_until_turned_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(symm.ENABLE_ENV, raising=False)
    assert symm.ENABLE_ENV in symm.unavailable()
    monkeypatch.setenv(symm.ENABLE_ENV, "1")
    if not torch.cuda.is_available():
        assert symm.unavailable() == "no CUDA device is visible to torch"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_messages_off_the_gpu_go_to_the_collective_backend(dtype: torch.dtype) -> None:
    report = check_collective("all_reduce", "pagoda_cuda.all_reduce:all_reduce", dtype, seed=5)
    report.raise_for_failures()
    assert len(report.checked) == len(ALL_REDUCE_SHAPES)


# Stand-ins for the two steps of setting up symmetric memory, which needs GPUs: each rank
# allocates or fails, and the exchange is a real collective (a gloo all-reduce), so a rank
# that enters it alone hangs the test.

def _allocate_fails_on_rank_0(device: torch.device) -> torch.Tensor:
    if dist.get_rank() == 0:
        raise RuntimeError("no symmetric memory on this device")
    return torch.zeros(4)


def _allocate(device: torch.device) -> torch.Tensor:
    return torch.zeros(4)


def _exchange(buffer: torch.Tensor, group: Any) -> None:
    dist.all_reduce(buffer, group=group)


def _exchange_fails_on_rank_1(buffer: torch.Tensor, group: Any) -> None:
    dist.all_reduce(buffer, group=group)
    if dist.get_rank() == 1:
        raise RuntimeError("peer not reachable")


CASES = {"both set up": (_allocate, _exchange),
         "rank 0 cannot allocate": (_allocate_fails_on_rank_0, _exchange),
         "rank 1's exchange fails": (_allocate, _exchange_fails_on_rank_1)}


def _rank(rank: int, address: str, case: str, queue: Any) -> None:
    dist.init_process_group("gloo", init_method=address, world_size=2, rank=rank)
    allocate, exchange = CASES[case]
    buffer = symm.map_buffer(dist.group.WORLD, torch.device("cpu"), allocate, exchange)
    queue.put((rank, buffer is not None))
    dist.destroy_process_group()


@pytest.mark.parametrize("case", list(CASES))
def test_ranks_agree_on_the_buffer(case: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    ranks = [ctx.Process(target=_rank, args=(r, address, case, queue), daemon=True)
             for r in range(2)]
    for p in ranks:
        p.start()
    for p in ranks:
        p.join(120)
        assert not p.is_alive(), f"{case}: a rank hung"
        assert p.exitcode == 0
    mapped = dict(queue.get(timeout=5) for _ in ranks)
    assert mapped == ({0: True, 1: True} if case == "both set up" else {0: False, 1: False})
