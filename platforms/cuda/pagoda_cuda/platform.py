"""The CUDA platform: NVIDIA GPUs through PyTorch, with Triton kernels."""

from __future__ import annotations

import os

import torch

from pagoda.platforms import MemoryInfo, Platform

MEMORY_UTILIZATION_ENV = "PAGODA_GPU_MEMORY_UTILIZATION"
DEFAULT_MEMORY_UTILIZATION = 0.9


def kv_cache_budget(memory: MemoryInfo, utilization: float) -> int:
    """Bytes left for the KV cache when this process may fill `utilization` of the device.

    Everything already in use is charged against that share: weights, the CUDA context,
    torch's cache and other processes on the GPU (measured after the model is loaded).
    The remaining (1 - utilization) of the device is the headroom for activations, since
    no profiling forward pass is run before the cache is sized.
    """
    in_use = memory.total - memory.available
    return max(0, int(memory.total * utilization) - in_use)


class CudaPlatform(Platform):
    name = "cuda"
    device_type = "cuda"
    dispatch_key = "CUDA"
    supported_dtypes: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float16, torch.float32)
    supports_graph_capture = True
    distributed_backend = "nccl"
    visible_devices_env = "CUDA_VISIBLE_DEVICES"
    preferred_attention_backends = ("triton", "reference")
    supported_quant_methods = ("none",)
    executor = "uniproc"

    def __init__(self, memory_utilization: float | None = None):
        if memory_utilization is None:
            memory_utilization = float(os.environ.get(MEMORY_UTILIZATION_ENV,
                                                      DEFAULT_MEMORY_UTILIZATION))
        if not 0 < memory_utilization <= 1:
            raise ValueError(f"GPU memory utilization must be in (0, 1], got "
                             f"{memory_utilization} ({MEMORY_UTILIZATION_ENV})")
        self.memory_utilization = memory_utilization
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

    def memory_info(self, index: int = 0) -> MemoryInfo:
        """Free and total device memory (all processes), after returning torch's unused
        cached blocks to the device so they count as free."""
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info(index)
        return MemoryInfo(total, free)

    def default_kv_cache_bytes(self, memory: MemoryInfo) -> int:
        """`memory_utilization` (default 0.9, env PAGODA_GPU_MEMORY_UTILIZATION) of the
        device's total memory, minus what is already in use; see `kv_cache_budget`."""
        return kv_cache_budget(memory, self.memory_utilization)

    def torch_device(self, index: int = 0) -> torch.device:
        return torch.device("cuda", index)

    def synchronize(self, index: int = 0) -> None:
        torch.cuda.synchronize(index)

    def set_device(self, index: int) -> None:
        torch.cuda.set_device(index)

    def describe(self) -> dict[str, object]:
        info = super().describe()
        info["capability"] = ".".join(map(str, self.capability(0)))
        info["memory_utilization"] = self.memory_utilization
        return info
