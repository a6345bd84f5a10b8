"""The Gaudi platform: Intel Gaudi accelerators (HPU) through habana_frameworks.torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from pagoda.platforms import MemoryInfo, Platform
from pagoda.platforms.platform import budget_within_utilization
from pagoda.platforms.step_padding import StepShape
from pagoda_gaudi.bucketing import BucketConfig, BucketPadding
from pagoda_gaudi.sdk import hpu

if TYPE_CHECKING:
    from pagoda.platforms.graphs import GraphCapture

DEFAULT_MEMORY_UTILIZATION = 0.9
"""Share of the card's memory the engine fills unless `--gpu-memory-utilization` says."""


class GaudiPlatform(Platform):
    name = "gaudi"
    device_type = "hpu"
    supported_dtypes: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float32)
    supports_graph_capture = True
    distributed_backend = "hccl"
    ray_resource = "HPU"
    preferred_attention_backends = ("fused_sdpa", "reference")

    def __init__(self, buckets: BucketConfig | None = None) -> None:
        self.buckets = buckets or BucketConfig.from_env()
        self.hpu = hpu()  # importing the bridge registers torch's "hpu" device

    def device_count(self) -> int:
        return self.hpu.device_count()

    def device_name(self, index: int = 0) -> str:
        return self.hpu.get_device_name(index)

    def memory_info(self, index: int = 0) -> MemoryInfo:
        """Free and total memory of the current card (the runtime reports no other)."""
        free, total = self.hpu.mem_get_info()
        return MemoryInfo(total, free)

    def default_kv_cache_bytes(self, memory: MemoryInfo) -> int:
        """What fits in 90% of the card after the weights, the runtime and the largest
        step's activations (see `budget_within_utilization`)."""
        return budget_within_utilization(memory, DEFAULT_MEMORY_UTILIZATION)

    def peak_memory_bytes(self, index: int = 0) -> int | None:
        return self.hpu.max_memory_allocated()

    def reset_peak_memory(self, index: int = 0) -> None:
        self.hpu.reset_peak_memory_stats()

    def graph_capture(self) -> GraphCapture:
        from pagoda_gaudi.graphs import HpuGraphCapture

        return HpuGraphCapture()

    def step_padding(self, limits: StepShape) -> BucketPadding:
        """Every step runs at a bucket's shape, so each shape compiles once."""
        return BucketPadding(self.buckets, limits)

    def synchronize(self, index: int = 0) -> None:
        self.hpu.synchronize()

    def set_device(self, index: int) -> None:
        self.hpu.set_device(index)

    def describe(self) -> dict[str, object]:
        info = super().describe()
        buckets = self.buckets
        info["buckets"] = {"strategy": buckets.strategy,
                           "batch_size": buckets.buckets(buckets.batch_size),
                           "tokens": buckets.buckets(buckets.tokens)}
        return info
