"""The Triton gemv kernel (`linear` for one row, `linear_with` up to 16) matches core's reference: on the
conformance kit's cases, on every path (float32 registers, tl.dot) with and without K
splits, odd N and K, with and without a bias, and on strided and batched inputs. Its
launch plans follow from the shape alone; on a GPU, calls replay from a CUDA graph."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")

from pagoda.kernels import triton as kernels  # noqa: E402
from pagoda.kernels.triton.gemv import (  # noqa: E402
    MAX_SPLITS,
    SERVED_ROWS,
    GemvPlan,
    linear_with,
    plan_gemv,
)
from pagoda.kernels.triton.launch import LaunchParams, TritonLaunch  # noqa: E402
from pagoda.ops import reference  # noqa: E402
from pagoda.testing import DTYPES, TOLERANCES, check_op, dtype_name  # noqa: E402

PLANS = (
    GemvPlan(8, 64, use_dot=False),
    GemvPlan(4, 32, use_dot=False, num_splits=3),
    GemvPlan(16, 64, use_dot=True),
    GemvPlan(32, 128, use_dot=True, num_splits=4),
)


def _randn(gen: torch.Generator, *shape: int, dtype: torch.dtype,
           scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(shape, generator=gen) * scale).to(dtype)


def _operands(gen: torch.Generator, rows: int, n: int, k: int,
              dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [rows, k], W [n, k] scaled to outputs of order one, bias [n]."""
    return (_randn(gen, rows, k, dtype=dtype), _randn(gen, n, k, dtype=dtype, scale=k**-0.5),
            _randn(gen, n, dtype=dtype))


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    tol = TOLERANCES[want.dtype]
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want.cpu(), atol=tol.atol, rtol=tol.rtol)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
def test_kernel_matches_reference(dtype: torch.dtype, device: str) -> None:
    report = check_op("linear", kernels.linear, dtype, device=device, seed=31)
    report.raise_for_failures()
    assert report.checked and not report.skipped


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.label)
@pytest.mark.parametrize("rows", [1, 3, 16])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=dtype_name)
def test_every_path_matches_reference(
    plan: GemvPlan, rows: int, dtype: torch.dtype, device: str
) -> None:
    """N = 37 leaves a partial column tile; K = 200 a partial K tile in each split, K = 256
    none (the unmasked loads)."""
    gen = torch.Generator().manual_seed(rows)
    for n, k in ((37, 200), (48, 256)):
        x, w, b = _operands(gen, rows, n, k, dtype)
        for bias in (None, b):
            got = linear_with(x.to(device), w.to(device),
                              bias.to(device) if bias is not None else None, plan)
            _close(got, reference.linear(x, w, bias))


def test_splits_add_up_the_same_way_every_time(device: str) -> None:
    gen = torch.Generator().manual_seed(7)
    x, w, b = (t.to(device) for t in _operands(gen, 2, 24, 1000, torch.bfloat16))
    plan = GemvPlan(8, 64, use_dot=False, num_splits=5)
    first = linear_with(x, w, b, plan)
    assert torch.equal(linear_with(x, w, b, plan), first)
    _close(first, reference.linear(x.cpu(), w.cpu(), b.cpu()))


def test_strided_batched_and_vector_inputs(device: str) -> None:
    """A [T, K] view with a wider row stride (a slice of a fused projection), [B, T, K] and
    [K] inputs: the output keeps x's leading shape."""
    gen = torch.Generator().manual_seed(9)
    wide, w, b = _operands(gen, 6, 40, 96, torch.bfloat16)
    w = w[:, :64].contiguous()
    for x in (wide[:, 16:80], wide[:, :64].reshape(2, 3, 64), wide[0, :64]):
        got = kernels.linear(x.to(device), w.to(device), b.to(device))
        assert got.shape == (*x.shape[:-1], 40)
        _close(got, reference.linear(x, w, b))


def test_more_rows_and_other_types_go_to_torch(device: str) -> None:
    gen = torch.Generator().manual_seed(11)
    x, w, b = (t.to(device) for t in _operands(gen, SERVED_ROWS + 1, 24, 32, torch.float32))
    assert torch.equal(kernels.linear(x, w, b), F.linear(x, w, b))
    empty = torch.empty(0, 32, device=device)
    assert kernels.linear(empty, w).shape == (0, 24)
    doubles = x[:2].double(), w.double()
    assert torch.equal(kernels.linear(*doubles), F.linear(*doubles))


def test_plans_follow_from_the_shape() -> None:
    """Llama-3-8B's layers on a 132-multiprocessor GPU (an H200), then narrow outputs."""
    one_row = plan_gemv(1, 4096, 4096, 132)
    assert not one_row.use_dot and one_row.num_splits == 1
    assert plan_gemv(4, 6144, 4096, 132).use_dot is False
    sixteen = plan_gemv(16, 4096, 14336, 132)
    assert sixteen.use_dot and sixteen.block_n == 16 and sixteen.num_splits == 1
    assert plan_gemv(16, 28672, 4096, 132).block_n == 64
    assert plan_gemv(1, 256, 4096, 132).num_splits == MAX_SPLITS
    assert plan_gemv(1, 256, 600, 132).num_splits == 1  # too short to split
    assert plan_gemv(1, 48, 64, 132).block_k == 64  # never longer than K needs
    amd = TritonLaunch(gemv=LaunchParams(num_warps=8, num_stages=2))
    plan = plan_gemv(16, 4096, 4096, 304, 2, amd)
    assert (plan.num_warps, plan.num_stages) == (8, 2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_replays_from_a_cuda_graph() -> None:
    """No host sync or allocation besides the output and split partials: capturable."""
    gen = torch.Generator().manual_seed(13)
    for rows, n, k in ((1, 4096, 1024), (8, 4096, 1024), (1, 256, 4096)):  # the last splits K
        x, w, b = (t.cuda() for t in _operands(gen, rows, n, k, torch.bfloat16))
        kernels.linear(x, w, b)  # compiles outside the graph
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = kernels.linear(x, w, b)
        x.copy_(_randn(gen, rows, k, dtype=torch.bfloat16))
        graph.replay()
        torch.cuda.synchronize()
        _close(out, F.linear(x, w, b))
