"""A platform whose device has a torch device module (`torch.get_device_module(type)`).

Device modules share one API for memory, peaks, synchronisation and the current device;
platforms built on one inherit these queries instead of repeating them.
"""

from __future__ import annotations

from types import ModuleType
from typing import ClassVar

import torch

from pagoda.platforms.platform import MemoryInfo, Platform, budget_within_utilization


class AcceleratorPlatform(Platform):
    """Memory, peaks, synchronisation and device selection through the torch module named
    by `device_type`."""

    default_memory_utilization: ClassVar[float] = 0.9
    """Share of the device's memory the engine fills unless `--gpu-memory-utilization` says."""

    @property
    def device_module(self) -> ModuleType:
        return torch.get_device_module(self.device_type)

    def memory_info(self, index: int = 0) -> MemoryInfo:
        """Free and total device memory (all processes), after returning torch's unused
        cached blocks to the device so they count as free."""
        self.device_module.empty_cache()
        free, total = self.device_module.mem_get_info(index)
        return MemoryInfo(total, free)

    def default_kv_cache_bytes(self, memory: MemoryInfo) -> int:
        """What fits in `default_memory_utilization` of the device after the weights, the
        runtime, other processes and the largest step's activations."""
        return budget_within_utilization(memory, self.default_memory_utilization)

    def peak_memory_bytes(self, index: int = 0) -> int | None:
        return self.device_module.max_memory_allocated(index)

    def reset_peak_memory(self, index: int = 0) -> None:
        self.device_module.reset_peak_memory_stats(index)

    def synchronize(self, index: int = 0) -> None:
        self.device_module.synchronize(index)

    def set_device(self, index: int) -> None:
        self.device_module.set_device(index)
