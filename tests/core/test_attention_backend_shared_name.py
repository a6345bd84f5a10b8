"""Two plugins may register one backend name for different platforms (e.g. "triton" for
CUDA and ROCm): selection takes the registration that runs on the current platform."""

from __future__ import annotations

import pluggy
import pytest
import torch

from pagoda.attention.backend import AttentionConfig
from pagoda.attention.reference import ReferenceAttentionBackend
from pagoda.attention.selector import AttentionBackendError, select_attention_backend
from pagoda.plugins.manager import PluginRegistries
from pagoda.plugins.specs import AttentionBackendSpec
from pagoda_cpu.attention import CpuSdpaAttentionBackend
from pagoda_cpu.platform import CpuPlatform

CONFIG = AttentionConfig(4, 2, 16, torch.float32, torch.float32, 16)


def _registries() -> PluginRegistries:
    regs = PluginRegistries(manager=pluggy.PluginManager("pagoda"))
    # Higher priority, but for another platform: must never be chosen on the CPU.
    regs.attention_backends.add(
        AttentionBackendSpec("shared", ReferenceAttentionBackend, ("elsewhere",), 100), "other")
    regs.attention_backends.add(
        AttentionBackendSpec("shared", CpuSdpaAttentionBackend, ("cpu",), 1), "cpu")
    return regs


def test_forced_name_takes_the_entry_for_this_platform():
    backend = select_attention_backend(CpuPlatform(), CONFIG, "shared", _registries())
    assert backend is CpuSdpaAttentionBackend


def test_preferred_name_takes_the_entry_for_this_platform():
    platform = CpuPlatform()
    platform.preferred_attention_backends = ("shared",)
    assert select_attention_backend(platform, CONFIG, None, _registries()) is (
        CpuSdpaAttentionBackend)


def test_name_registered_only_elsewhere_lists_where_it_runs():
    regs = _registries()
    regs.attention_backends._entries["shared"].pop()  # keep only the "elsewhere" one
    with pytest.raises(AttentionBackendError, match="does not run on platform 'cpu'.*elsewhere"):
        select_attention_backend(CpuPlatform(), CONFIG, "shared", regs)
