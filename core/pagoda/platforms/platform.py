"""The Platform interface: one per device family, capabilities as data."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import torch


@dataclass(frozen=True)
class MemoryInfo:
    """Device memory in bytes."""

    total: int
    available: int


class Platform(ABC):
    """A device family. Core asks the platform what it supports; it never asks "is this X?".

    Subclasses fill in the class attributes (capabilities) and the few queries below.
    """

    name: ClassVar[str]
    """Name used by `--device` (e.g. "cpu", "cuda")."""

    device_type: ClassVar[str]
    """torch device type tensors live on (e.g. "cpu", "cuda", "xla")."""

    dispatch_key: ClassVar[str]
    """torch dispatch key of the device (e.g. "CPU", "CUDA")."""

    supported_dtypes: ClassVar[tuple[torch.dtype, ...]]
    """Model dtypes this platform can run, best first; the first is `--dtype auto`."""

    fp8_dtype: ClassVar[torch.dtype | None] = None
    """The fp8 flavour of this hardware, if it has one."""

    supports_graph_capture: ClassVar[bool] = False
    """Whether decode steps can be captured as device graphs."""

    distributed_backend: ClassVar[str]
    """torch.distributed backend between devices of this platform (gloo, nccl, ...)."""

    visible_devices_env: ClassVar[str | None] = None
    """Environment variable restricting visible devices (e.g. CUDA_VISIBLE_DEVICES)."""

    preferred_attention_backends: ClassVar[tuple[str, ...]] = ()
    """Attention backend names in order of preference; the registry fills in the rest."""

    supported_quant_methods: ClassVar[tuple[str, ...]] = ("none",)
    """Quantization methods this platform can run."""

    executor: ClassVar[str] = "uniproc"
    """Executor name used when the user asks for none."""

    worker: ClassVar[str] = "pagoda.worker.worker:Worker"
    """The `Worker` class that owns one device of this platform."""

    @property
    def default_dtype(self) -> torch.dtype:
        return self.supported_dtypes[0]

    @abstractmethod
    def device_count(self) -> int:
        """Number of devices of this platform visible to the process."""

    @abstractmethod
    def device_name(self, index: int = 0) -> str:
        """Human-readable name of a device (e.g. the CPU model)."""

    @abstractmethod
    def memory_info(self, index: int = 0) -> MemoryInfo:
        """Total and currently available memory of a device."""

    def default_kv_cache_bytes(self, memory: MemoryInfo) -> int:
        """KV cache size when the user sets none: half the device's free memory."""
        return memory.available // 2

    def torch_device(self, index: int = 0) -> torch.device:
        """The torch device for device `index`."""
        return torch.device(self.device_type, index)

    def synchronize(self, index: int = 0) -> None:
        """Wait for queued work on the device (no-op for synchronous devices)."""

    def set_device(self, index: int) -> None:
        """Make device `index` current for this process (multi-device workers)."""

    def describe(self) -> dict[str, object]:
        """Capabilities as plain data, for `pagoda plugins` and start-up logs."""
        return {
            "name": self.name,
            "device_type": self.device_type,
            "dispatch_key": self.dispatch_key,
            "devices": [self.device_name(i) for i in range(self.device_count())],
            "supported_dtypes": [str(d).removeprefix("torch.") for d in self.supported_dtypes],
            "fp8_dtype": str(self.fp8_dtype).removeprefix("torch.") if self.fp8_dtype else None,
            "supports_graph_capture": self.supports_graph_capture,
            "distributed_backend": self.distributed_backend,
            "preferred_attention_backends": list(self.preferred_attention_backends),
            "supported_quant_methods": list(self.supported_quant_methods),
            "executor": self.executor,
        }
