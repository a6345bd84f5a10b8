"""The ROCm platform: AMD GPUs through a HIP build of PyTorch, with Triton kernels.

HIP builds of torch present AMD GPUs through the CUDA API: tensors live on "cuda" devices,
kernels dispatch under the CUDA key, `torch.cuda.*` queries the GPUs, torch.cuda graphs
record HIP graphs and torch.distributed's "nccl" backend is RCCL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from pagoda.platforms import MemoryInfo, Platform
from pagoda.platforms.platform import budget_within_utilization
from pagoda_rocm.arch import base_arch, fp8_dtype_for_arch

if TYPE_CHECKING:
    from pagoda.platforms.graphs import GraphCapture

DEFAULT_MEMORY_UTILIZATION = 0.9
"""Share of the GPU's memory the engine fills unless `--gpu-memory-utilization` says."""


class RocmPlatform(Platform):
    name = "rocm"
    device_type = "cuda"
    dispatch_key = "CUDA"
    supported_dtypes: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float16, torch.float32)
    supports_graph_capture = True
    executes_asynchronously = True
    distributed_backend = "nccl"
    visible_devices_env = "HIP_VISIBLE_DEVICES"
    preferred_attention_backends = ("triton", "reference")
    supported_quant_methods = ("none",)
    executor = "uniproc"

    def __init__(self) -> None:
        self.fp8_dtype = fp8_dtype_for_arch(self.arch(0))

    def arch(self, index: int = 0) -> str:
        """The gfx target of device `index`, e.g. "gfx942" for an MI300X."""
        return base_arch(torch.cuda.get_device_properties(index).gcnArchName)

    def device_count(self) -> int:
        return torch.cuda.device_count()

    def device_name(self, index: int = 0) -> str:
        props = torch.cuda.get_device_properties(index)
        return f"{props.name} ({props.total_memory / 2**30:.0f} GiB, {self.arch(index)})"

    def memory_info(self, index: int = 0) -> MemoryInfo:
        """Free and total GPU memory (all processes), after returning torch's unused cached
        blocks to the device so they count as free."""
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info(index)
        return MemoryInfo(total, free)

    def default_kv_cache_bytes(self, memory: MemoryInfo) -> int:
        """What fits in 90% of the GPU after the weights, the runtime, other processes and
        the largest step's activations (see `budget_within_utilization`)."""
        return budget_within_utilization(memory, DEFAULT_MEMORY_UTILIZATION)

    def peak_memory_bytes(self, index: int = 0) -> int | None:
        return torch.cuda.max_memory_allocated(index)

    def reset_peak_memory(self, index: int = 0) -> None:
        torch.cuda.reset_peak_memory_stats(index)

    def graph_capture(self) -> GraphCapture:
        from pagoda_rocm.graphs import HipGraphCapture

        return HipGraphCapture()

    def torch_device(self, index: int = 0) -> torch.device:
        return torch.device("cuda", index)

    def synchronize(self, index: int = 0) -> None:
        torch.cuda.synchronize(index)

    def set_device(self, index: int) -> None:
        torch.cuda.set_device(index)

    def describe(self) -> dict[str, object]:
        info = super().describe()
        info["arch"] = self.arch(0)
        info["hip_version"] = torch.version.hip
        return info
