"""The ROCm platform: AMD GPUs through a HIP build of PyTorch, with Triton kernels.

HIP builds of torch present AMD GPUs through the CUDA API: tensors live on "cuda" devices,
kernels dispatch under the CUDA key, `torch.cuda.*` queries the GPUs, torch.cuda graphs
record HIP graphs and torch.distributed's "nccl" backend is RCCL.
"""

from __future__ import annotations

from typing import Any

import torch

from pagoda.platforms.accelerator import AcceleratorPlatform
from pagoda_rocm.arch import base_arch


class RocmPlatform(AcceleratorPlatform):
    name = "rocm"
    device_type = "cuda"
    supported_dtypes: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float16, torch.float32)
    supports_graph_capture = True
    graph_class = "CUDAGraph"
    executes_asynchronously = True
    distributed_backend = "nccl"
    preferred_attention_backends = ("triton", "reference")

    def arch(self, index: int = 0) -> str:
        """The gfx target of device `index`, e.g. "gfx942" for an MI300X."""
        return self.device_detail(torch.cuda.get_device_properties(index))

    def device_detail(self, props: Any) -> str:
        return base_arch(props.gcnArchName)

    def describe(self) -> dict[str, object]:
        info = super().describe()
        info["arch"] = self.arch(0)
        info["hip_version"] = torch.version.hip
        return info
