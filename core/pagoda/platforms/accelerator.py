"""A platform whose device has a torch device module (`torch.get_device_module(type)`).

Device modules share one API for device counts and properties, memory, peaks,
synchronisation, the current device and (some of them) graphs; platforms built on one
inherit these queries instead of repeating them.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from pagoda.platforms.graphs import TorchGraphCapture, has_graph_api
from pagoda.platforms.platform import MemoryInfo, Platform, budget_within_utilization

if TYPE_CHECKING:
    from pagoda.platforms.graphs import GraphCapture


class AcceleratorPlatform(Platform):
    """Devices, memory, peaks, synchronisation, device selection and graph capture through
    the torch module named by `device_type`."""

    default_memory_utilization: ClassVar[float] = 0.9
    """Share of the device's memory the engine fills unless `--gpu-memory-utilization` says."""

    ray_resource: ClassVar[str | None] = "GPU"  # Ray's name for CUDA, ROCm and XPU devices

    graph_class: ClassVar[str | None] = None
    """The device module's graph class (e.g. "CUDAGraph"), recorded by `graph_capture` when
    `supports_graph_capture`; None: no graphs."""

    @property
    def device_module(self) -> ModuleType:
        return torch.get_device_module(self.device_type)

    def device_count(self) -> int:
        return self.device_module.device_count()

    def device_name(self, index: int = 0) -> str:
        """e.g. "NVIDIA H200 (140 GiB, sm_90)": the name, memory and `device_detail`."""
        props = self.device_module.get_device_properties(index)
        detail = self.device_detail(props)
        return (f"{props.name} ({props.total_memory / 2**30:.0f} GiB"
                f"{f', {detail}' if detail else ''})")

    def device_detail(self, props: Any) -> str | None:
        """What `device_name` adds from a device's properties (e.g. its architecture)."""
        return None

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

    def has_graph_api(self) -> bool:
        """Whether this torch's device module can record `graph_class` graphs (for platforms
        whose graphs only newer torch builds have)."""
        return self.graph_class is not None and has_graph_api(self.device_module,
                                                              self.graph_class)

    def graph_capture(self) -> GraphCapture | None:
        if not self.supports_graph_capture or self.graph_class is None:
            return None
        return TorchGraphCapture(self.device_module, self.graph_class)

    def synchronize(self, index: int = 0) -> None:
        self.device_module.synchronize(index)

    def set_device(self, index: int) -> None:
        self.device_module.set_device(index)
