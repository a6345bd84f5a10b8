"""The XPU platform: Intel GPUs through PyTorch's XPU backend (SYCL / Level Zero)."""

from __future__ import annotations

import torch

from pagoda.platforms import MemoryInfo
from pagoda.platforms.accelerator import AcceleratorPlatform
from pagoda_xpu.distributed import installed_backend
from pagoda_xpu.ipex import ipex_unavailable_reason


class XpuPlatform(AcceleratorPlatform):
    name = "xpu"
    device_type = "xpu"
    supported_dtypes: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float16, torch.float32)
    graph_class = "XPUGraph"  # newer torch only: see __init__
    distributed_backend = "xccl"  # replaced by what is installed, see __init__
    preferred_attention_backends = ("ipex", "triton", "reference")

    def __init__(self) -> None:
        choice = installed_backend()
        self.distributed_backend = choice.backend
        self.distributed_backend_reason = choice.reason
        self.supports_graph_capture = self.has_graph_api()

    def memory_info(self, index: int = 0) -> MemoryInfo:
        """Free and total GPU memory after returning torch's unused cached blocks. Drivers
        that cannot report free memory leave what torch has not reserved as free."""
        torch.xpu.empty_cache()
        try:
            free, total = torch.xpu.mem_get_info(index)
        except RuntimeError:
            total = torch.xpu.get_device_properties(index).total_memory
            free = total - torch.xpu.memory_reserved(index)
        return MemoryInfo(total, free)

    def describe(self) -> dict[str, object]:
        info = super().describe()
        info["xpu_version"] = torch.version.xpu
        info["distributed_backend_reason"] = self.distributed_backend_reason
        info["ipex"] = ipex_unavailable_reason() or "installed"
        return info
