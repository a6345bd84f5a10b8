"""The CUDA platform: NVIDIA GPUs through PyTorch, with Triton kernels."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from pagoda.platforms.accelerator import AcceleratorPlatform

if TYPE_CHECKING:
    from pagoda.platforms.graphs import GraphCapture


class CudaPlatform(AcceleratorPlatform):
    name = "cuda"
    device_type = "cuda"
    dispatch_key = "CUDA"
    supported_dtypes: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float16, torch.float32)
    supports_graph_capture = True
    executes_asynchronously = True
    distributed_backend = "nccl"
    visible_devices_env = "CUDA_VISIBLE_DEVICES"
    preferred_attention_backends = ("triton", "reference")
    supported_quant_methods = ("none",)
    executor = "uniproc"

    def __init__(self) -> None:
        major, minor = self.capability(0)
        if major < 8:  # bfloat16 tensor cores (and Triton's bf16 dot) start with Ampere
            self.supported_dtypes = (torch.float16, torch.float32)
        # fp8 (e4m3) tensor cores: Ada (8.9) and Hopper (9.0) onwards.
        self.fp8_dtype = torch.float8_e4m3fn if (major, minor) >= (8, 9) else None

    def capability(self, index: int = 0) -> tuple[int, int]:
        """Compute capability of device `index`, e.g. (9, 0) for an H100/H200."""
        return torch.cuda.get_device_capability(index)

    def device_count(self) -> int:
        return torch.cuda.device_count()

    def device_name(self, index: int = 0) -> str:
        props = torch.cuda.get_device_properties(index)
        return (f"{props.name} ({props.total_memory / 2**30:.0f} GiB, "
                f"sm_{props.major}{props.minor})")

    def graph_capture(self) -> GraphCapture:
        from pagoda_cuda.graphs import CudaGraphCapture

        return CudaGraphCapture()

    def torch_device(self, index: int = 0) -> torch.device:
        return torch.device("cuda", index)

    def describe(self) -> dict[str, object]:
        info = super().describe()
        info["capability"] = ".".join(map(str, self.capability(0)))
        return info
