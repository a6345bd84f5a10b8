"""The template Platform: capabilities as data, plus memory queries."""

from __future__ import annotations

import torch

from pagoda.platforms import MemoryInfo, Platform
from pagoda.platforms.host_memory import host_memory


class TemplatePlatform(Platform):
    name = "template"
    device_type = "cpu"  # a real plugin: its torch device type ("xpu", "hpu", ...)
    supported_dtypes = (torch.float32, torch.bfloat16)
    distributed_backend = "gloo"
    ray_resource = "CPU"
    preferred_attention_backends = ("template",)
    executor = "uniproc"

    def device_count(self) -> int:
        return 1

    def device_name(self, index: int = 0) -> str:
        return "host CPU (template platform)"

    def memory_info(self, index: int = 0) -> MemoryInfo:
        # A device with a torch device module: derive from AcceleratorPlatform instead.
        return host_memory()

    def torch_device(self, index: int = 0) -> torch.device:
        return torch.device("cpu")
