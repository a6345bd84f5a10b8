"""The collective conformance kit: `all_reduce` on two CPU ranks over gloo. The reference
(torch.distributed's) passes, as a registered provider too; implementations that do not
sum, or that raise, fail on the cases that show it."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist

from pagoda.plugins import KernelProvider
from pagoda.testing import check_kernel_provider
from pagoda.testing.collective_conformance import ALL_REDUCE_SHAPES, check_collective

HERE = "tests.distributed.test_collective_conformance"


def averages(x: torch.Tensor, group: Any) -> torch.Tensor:
    dist.all_reduce(x, op=dist.ReduceOp.AVG, group=group)
    return x


def keeps_its_own(x: torch.Tensor, group: Any) -> torch.Tensor:
    return x


def raises(x: torch.Tensor, group: Any) -> torch.Tensor:
    raise NotImplementedError("no peer-to-peer links")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reference_sums_over_the_ranks(dtype: torch.dtype) -> None:
    report = check_collective("all_reduce", "pagoda.ops.reference:all_reduce", dtype, seed=3)
    report.raise_for_failures()
    assert len(report.checked) == len(ALL_REDUCE_SHAPES)


@pytest.mark.parametrize("impl", ["averages", "keeps_its_own", "raises"])
def test_broken_implementations_fail(impl: str) -> None:
    report = check_collective("all_reduce", f"{HERE}:{impl}", torch.float32)
    assert not report.checked and len(report.failures) >= len(ALL_REDUCE_SHAPES)
    expected = "raised NotImplementedError" if impl == "raises" else "elements beyond"
    assert all(expected in f for f in report.failures if f.startswith("x["))


def test_a_registered_provider_is_checked_on_two_ranks() -> None:
    provider = KernelProvider("all_reduce", "mine", f"{HERE}:averages")
    report = check_kernel_provider(provider, torch.float32, plugin="test")
    assert report.subject.startswith("all_reduce by test/mine in float32")
    assert not report.checked and report.failures
