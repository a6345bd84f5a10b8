"""The template Platform: capabilities as data, plus memory queries."""

from __future__ import annotations

import os

import torch

from pagoda.platforms import MemoryInfo, Platform


class TemplatePlatform(Platform):
    name = "template"
    device_type = "cpu"  # a real plugin: its torch device type ("xpu", "hpu", ...)
    dispatch_key = "CPU"
    supported_dtypes = (torch.float32, torch.bfloat16)
    distributed_backend = "gloo"
    preferred_attention_backends = ("template",)
    executor = "uniproc"

    def device_count(self) -> int:
        return 1

    def device_name(self, index: int = 0) -> str:
        return "host CPU (template platform)"

    def memory_info(self, index: int = 0) -> MemoryInfo:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return MemoryInfo(total, available)

    def torch_device(self, index: int = 0) -> torch.device:
        return torch.device("cpu")
