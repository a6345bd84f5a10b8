"""The ROCm platform: AMD GPUs through a HIP build of PyTorch, with Triton kernels.

HIP builds of torch present AMD GPUs through the CUDA API: tensors live on "cuda" devices,
kernels dispatch under the CUDA key, `torch.cuda.*` queries the GPUs, torch.cuda graphs
record HIP graphs and torch.distributed's "nccl" backend is RCCL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from pagoda.platforms.accelerator import AcceleratorPlatform
from pagoda_rocm.arch import base_arch, fp8_dtype_for_arch

if TYPE_CHECKING:
    from pagoda.platforms.graphs import GraphCapture


class RocmPlatform(AcceleratorPlatform):
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

    def graph_capture(self) -> GraphCapture:
        from pagoda_rocm.graphs import HipGraphCapture

        return HipGraphCapture()

    def torch_device(self, index: int = 0) -> torch.device:
        return torch.device("cuda", index)

    def describe(self) -> dict[str, object]:
        info = super().describe()
        info["arch"] = self.arch(0)
        info["hip_version"] = torch.version.hip
        return info
