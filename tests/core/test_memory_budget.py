"""The KV cache budget under a device memory utilization cap."""

from pagoda.platforms import MemoryInfo
from pagoda.platforms.platform import budget_within_utilization

GIB = 2**30


def test_budget_is_utilization_minus_memory_in_use() -> None:
    after_load = MemoryInfo(total=140 * GIB, available=122 * GIB)  # 18 GiB in use
    assert budget_within_utilization(after_load, 0.9) == int(140 * GIB * 0.9) - 18 * GIB
    assert budget_within_utilization(after_load, 0.5) == 52 * GIB


def test_budget_never_negative() -> None:
    assert budget_within_utilization(MemoryInfo(total=140 * GIB, available=10 * GIB), 0.9) == 0
