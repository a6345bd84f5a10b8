"""The XPU platform: Intel GPUs through PyTorch's XPU backend (SYCL / Level Zero)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from pagoda.platforms import MemoryInfo
from pagoda.platforms.accelerator import AcceleratorPlatform
from pagoda_xpu.distributed import installed_backend
from pagoda_xpu.graphs import has_graph_api
from pagoda_xpu.ipex import ipex_unavailable_reason

if TYPE_CHECKING:
    from pagoda.platforms.graphs import GraphCapture


class XpuPlatform(AcceleratorPlatform):
    name = "xpu"
    device_type = "xpu"
    dispatch_key = "XPU"
    supported_dtypes: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float16, torch.float32)
    distributed_backend = "xccl"  # replaced by what is installed, see __init__
    visible_devices_env = "ZE_AFFINITY_MASK"
    preferred_attention_backends = ("ipex", "triton", "reference")
    supported_quant_methods = ("none",)
    executor = "uniproc"

    def __init__(self) -> None:
        choice = installed_backend()
        self.distributed_backend = choice.backend
        self.distributed_backend_reason = choice.reason
        self.supports_graph_capture = has_graph_api()

    def device_count(self) -> int:
        return torch.xpu.device_count()

    def device_name(self, index: int = 0) -> str:
        props = torch.xpu.get_device_properties(index)
        return f"{props.name} ({props.total_memory / 2**30:.0f} GiB)"

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

    def graph_capture(self) -> GraphCapture | None:
        if not self.supports_graph_capture:
            return None
        from pagoda_xpu.graphs import XpuGraphCapture

        return XpuGraphCapture()

    def torch_device(self, index: int = 0) -> torch.device:
        return torch.device("xpu", index)

    def describe(self) -> dict[str, object]:
        info = super().describe()
        info["xpu_version"] = torch.version.xpu
        info["distributed_backend_reason"] = self.distributed_backend_reason
        info["ipex"] = ipex_unavailable_reason() or "installed"
        return info
