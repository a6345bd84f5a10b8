"""A plugin from outside the repo adds a usable device end to end: its probe is seen
without importing its heavy module, `auto` picks it by score, its factory builds the
Platform, and its kernels and attention backend win resolution on it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_harness import run_python, write_plugin_distribution

ENTRY = """
    from pagoda.plugins import (PLUGIN_API_VERSION, AttentionBackendSpec, KernelProvider,
                                PlatformProbe, PluginInfo, hookimpl)

    HEAVY = "fake_pagoda_acme_platform"

    @hookimpl
    def pagoda_plugin_info():
        return PluginInfo("acme", "0.3.0", PLUGIN_API_VERSION, "ACME accelerators",
                          package="pagoda-fake-acme", verified_on="no ACME hardware yet")

    @hookimpl
    def pagoda_platform_probe():
        return [PlatformProbe("acme", usable=True, score=50, devices=("ACME A1",))]

    @hookimpl
    def pagoda_platform_factory(name):
        if name != "acme":
            return None
        from fake_pagoda_acme_platform import AcmePlatform
        return AcmePlatform()

    @hookimpl
    def pagoda_kernel_providers():
        return [KernelProvider("rms_norm", "acme_rms", HEAVY + ":rms_norm", ("acme",), 50)]

    @hookimpl
    def pagoda_attention_backends():
        return [AttentionBackendSpec("acme_attn", HEAVY + ":AcmeAttention", ("acme",), 50)]
"""

HEAVY = """
    import torch
    from pagoda.attention.reference import ReferenceAttentionBackend
    from pagoda.ops import reference
    from pagoda.platforms import MemoryInfo, Platform

    class AcmePlatform(Platform):
        name = "acme"
        device_type = "cpu"
        supported_dtypes = (torch.bfloat16,)
        distributed_backend = "gloo"
        preferred_attention_backends = ("acme_attn",)

        def device_count(self):
            return 1

        def device_name(self, index=0):
            return "ACME A1"

        def memory_info(self, index=0):
            return MemoryInfo(16 << 30, 8 << 30)

    class AcmeAttention(ReferenceAttentionBackend):
        name = "acme_attn"

    def rms_norm(x, weight, eps):
        return reference.rms_norm(x, weight, eps)
"""

SCRIPT = """
import json, sys
import torch
from pagoda.attention import AttentionConfig
from pagoda.attention.selector import select_attention_backend
from pagoda.ops import OpTable
from pagoda.platforms import resolve_platform
from pagoda.platforms.selection import choose_device
from pagoda.plugins import get_registries
from pagoda.testing import check_kernel_provider

regs = get_registries()
heavy_after_discovery = "fake_pagoda_acme_platform" in sys.modules
platform = resolve_platform()
config = AttentionConfig(8, 2, 64, torch.bfloat16, torch.bfloat16, 16)
[provider] = [e for e in regs.kernels.candidates("rms_norm") if e.plugin == "acme"]
print(json.dumps({
    "heavy_after_discovery": heavy_after_discovery,
    "auto": choose_device("auto", regs),
    "platform": type(platform).__name__,
    "describe": platform.describe(),
    "memory": [platform.memory_info().total, platform.memory_info().available],
    "ops": OpTable("acme", dtype=torch.bfloat16).providers,
    "cpu_ops": OpTable("cpu").providers,
    "attention": select_attention_backend(platform, config).name,
    "conformance": check_kernel_provider(provider.spec, torch.bfloat16, plugin="acme").summary(),
}))
"""


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root: Path = tmp_path_factory.mktemp("acme")
    write_plugin_distribution(root, "acme", ENTRY, version="0.3.0",
                              modules={"fake_pagoda_acme_platform": HEAVY})
    result = run_python(["-c", SCRIPT], pythonpath=root)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_probe_does_not_import_heavy_module(outcome: dict[str, Any]) -> None:
    assert outcome["heavy_after_discovery"] is False


def test_auto_picks_highest_score(outcome: dict[str, Any]) -> None:
    assert outcome["auto"] == "acme"  # 50 beats cpu's 10


def test_factory_builds_the_platform(outcome: dict[str, Any]) -> None:
    assert outcome["platform"] == "AcmePlatform"
    described = outcome["describe"]
    assert (described["name"], described["devices"]) == ("acme", ["ACME A1"])
    assert described["supported_dtypes"] == ["bfloat16"]
    assert outcome["memory"] == [16 << 30, 8 << 30]


def test_its_kernels_win_on_its_platform_only(outcome: dict[str, Any]) -> None:
    ops = outcome["ops"]
    assert ops.pop("rms_norm") == "acme/acme_rms"
    assert set(ops.values()) == {"core/reference"}
    assert outcome["cpu_ops"]["rms_norm"] in ("cpu/cpu_csrc", "cpu/cpu_native")  # csrc built?


def test_its_attention_backend_is_selected(outcome: dict[str, Any]) -> None:
    assert outcome["attention"] == "acme_attn"


def test_conformance_kit_runs_on_its_kernels(outcome: dict[str, Any]) -> None:
    assert outcome["conformance"].startswith("rms_norm by acme/acme_rms in bfloat16")
    assert ", 0 failed, 0 skipped" in outcome["conformance"]
