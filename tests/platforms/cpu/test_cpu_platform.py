"""CpuPlatform reports this machine's real values."""

from __future__ import annotations

import importlib
import json
import os
import shutil

import pytest
import torch

from pagoda.platforms import Platform, resolve_platform
from pagoda.plugins import get_registries


@pytest.fixture(scope="module")
def cpu() -> Platform:
    return resolve_platform("cpu")


def _proc_meminfo_kib(field: str) -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    raise KeyError(field)


def test_capabilities(cpu: Platform) -> None:
    assert type(cpu).__name__ == "CpuPlatform"
    assert (cpu.name, cpu.device_type) == ("cpu", "cpu")
    assert cpu.supported_dtypes == (torch.float32, torch.bfloat16, torch.float16)
    with open("/proc/cpuinfo") as f:
        native_bf16 = any(flag in f.read().split() for flag in ("avx512_bf16", "amx_bf16"))
    assert cpu.default_dtype == (torch.bfloat16 if native_bf16 else torch.float32)
    assert cpu.distributed_backend == "gloo"
    assert cpu.preferred_attention_backends[0] == "cpu_sdpa"
    assert cpu.supports_graph_capture is False and cpu.graph_capture() is None
    assert cpu.torch_device(0) == torch.device("cpu")


def test_memory(cpu: Platform) -> None:
    mem = cpu.memory_info()
    assert mem.total > mem.available > 0
    if os.path.exists("/proc/meminfo"):
        assert mem.total == _proc_meminfo_kib("MemTotal") * 1024
    else:
        assert mem.total == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def test_cores_and_device_name(cpu: Platform) -> None:
    cores = len(os.sched_getaffinity(0))
    assert cpu.core_count() == cores  # type: ignore[attr-defined]
    assert cpu.device_count() == 1
    assert cpu.device_name().endswith(f"({cores} cores)")


def test_describe_is_plain_data(cpu: Platform) -> None:
    described = json.loads(json.dumps(cpu.describe()))
    assert described["supported_dtypes"] == ["float32", "bfloat16", "float16"]
    assert described["devices"] == [cpu.device_name()]
    assert described["distributed_backend"] == "gloo"
    assert described["preferred_attention_backends"] == ["cpu_sdpa", "reference"]


def test_probe_matches_platform(cpu: Platform) -> None:
    probe = get_registries().probes.get("cpu").spec
    assert probe.usable and probe.score == 10 and probe.reason is None
    assert probe.visible_devices_env == ()
    assert probe.devices == (cpu.device_name(),)


def test_native_kernels_built_wherever_a_compiler_is() -> None:
    """`make install` builds pagoda-cpu's kernels (csrc); only a machine without a C++
    compiler may lack them, so a broken build fails here rather than skipping their tests."""
    if shutil.which("c++") or shutil.which("g++"):
        importlib.import_module("pagoda_cpu._C")
