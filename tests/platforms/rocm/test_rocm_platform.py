"""pagoda-rocm on a machine without an AMD GPU: the registration (plugins list, --device
error, op fallback), the choices made from an architecture name (wavefront width, launch
parameters), the KV cache budget, and the ROCm kernel wrappers run in Triton's CPU
interpreter (which ignores launch parameters: that is what compile_rocm.py checks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import torch

pytest.importorskip("pagoda_rocm", reason="pagoda-rocm is not installed")

from pagoda.kernels.triton.launch import DEFAULT_LAUNCH, LaunchParams, TritonLaunch  # noqa: E402
from pagoda.kernels.triton_providers import TRITON_OPS  # noqa: E402
from pagoda.ops import OPS, OpTable  # noqa: E402
from pagoda.platforms import MemoryInfo  # noqa: E402
from pagoda_rocm.arch import gfx_major, wavefront_size  # noqa: E402
from pagoda_rocm.launch import launch_for_arch  # noqa: E402
from pagoda_rocm.platform import RocmPlatform  # noqa: E402

HAS_ROCM = torch.version.hip is not None and torch.cuda.is_available()


def _installed() -> bool:
    try:
        return metadata.distribution("pagoda-rocm").version == "0.1.0"
    except metadata.PackageNotFoundError:
        return False


needs_install = pytest.mark.skipif(
    not _installed(), reason="pagoda-rocm is not installed: pip install -e platforms/rocm")
no_amd_gpu = pytest.mark.skipif(HAS_ROCM, reason="an AMD GPU is visible")


@pytest.mark.parametrize(("arch", "major", "wavefront"), [
    ("gfx942", 9, 64), ("gfx90a", 9, 64), ("gfx950", 9, 64), ("gfx906", 9, 64),
    ("gfx1030", 10, 32), ("gfx1100", 11, 32), ("gfx1201", 12, 32),
])
def test_wavefront_size(arch: str, major: int, wavefront: int) -> None:
    assert (gfx_major(arch), wavefront_size(arch)) == (major, wavefront)


def test_launch_parameters_keep_threads_per_program() -> None:
    cdna, rdna = launch_for_arch("gfx942:sramecc+:xnack-"), launch_for_arch("gfx1201")
    assert cdna == TritonLaunch(attention=LaunchParams(num_warps=4, num_stages=1),
                                reduce=LaunchParams(num_warps=2),
                                elementwise=LaunchParams(num_warps=2),
                                gemv=LaunchParams(num_warps=4, num_stages=2))
    assert rdna.attention == LaunchParams(num_warps=8, num_stages=1)
    assert rdna.gemv == LaunchParams(num_warps=8, num_stages=2)
    assert rdna.elementwise == rdna.reduce == LaunchParams(num_warps=4)
    assert cdna.attention.kwargs() == {"num_warps": 4, "num_stages": 1}
    assert DEFAULT_LAUNCH.attention.kwargs() == DEFAULT_LAUNCH.elementwise.kwargs() == {}


def test_capabilities_as_data() -> None:
    assert (RocmPlatform.name, RocmPlatform.device_type) == ("rocm", "cuda")
    assert RocmPlatform.supported_dtypes == (torch.bfloat16, torch.float16, torch.float32)
    assert RocmPlatform.distributed_backend == "nccl"
    assert RocmPlatform.supports_graph_capture and RocmPlatform.graph_class == "CUDAGraph"
    assert RocmPlatform.preferred_attention_backends[0] == "triton"


def test_default_kv_cache_budget() -> None:
    gib = 2**30
    platform = RocmPlatform.__new__(RocmPlatform)  # the budget needs no GPU
    after_load = MemoryInfo(total=192 * gib, available=160 * gib)  # 32 GiB in use
    assert platform.default_kv_cache_bytes(after_load) == int(192 * gib * 0.9) - 32 * gib
    assert platform.default_kv_cache_bytes(MemoryInfo(192 * gib, 10 * gib)) == 0


@needs_install
def test_listed_by_pagoda_plugins() -> None:
    result = subprocess.run([sys.executable, "-m", "pagoda.cli.main", "plugins", "--json"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    rec = {p["name"]: p for p in report["plugins"]}["rocm"]
    assert (rec["status"], rec["distribution"], rec["version"], rec["api_version"]) == (
        "loaded", "pagoda-rocm", "0.1.0", 3)
    assert "never run" in rec["verified_on"]
    assert rec["attention_backends"] == ["triton"]
    assert rec["kernel_providers"] == {op: ["triton"] for op in TRITON_OPS}
    [device] = rec["devices"]
    assert device["name"] == "rocm" and device["usable"] is HAS_ROCM
    assert (device["reason"] is None) is HAS_ROCM
    [backend] = [b for b in report["backends"] if b["name"] == "rocm"]
    assert backend["status"] == ("usable" if HAS_ROCM else "unusable")
    assert backend["verified_on"] == rec["verified_on"]


@needs_install
@no_amd_gpu
def test_asking_for_rocm_without_an_amd_gpu_says_why() -> None:
    from pagoda.platforms import resolve_platform
    from pagoda.platforms.selection import DeviceError

    with pytest.raises(DeviceError, match="Device 'rocm' is installed but not usable here: "
                                          ".*(not a ROCm build|no AMD GPU visible)"):
        resolve_platform("rocm")


@needs_install
@no_amd_gpu
def test_ops_fall_back_to_the_references_without_an_amd_gpu() -> None:
    providers = OpTable("rocm", dtype=torch.bfloat16).providers
    # the quantized linears have no core fallback: not offered here at all
    assert providers == {op: "core/reference" for op, spec in OPS.items() if not spec.optional}


@needs_install
def test_kernel_checks() -> None:
    from pagoda.plugins import get_registries, load_target
    from pagoda_rocm.probe import torch_build_problem

    [entry, *_] = [e for e in get_registries().kernels if e.plugin == "rocm"]
    supports = load_target(entry.spec.supports)
    assert supports(dtype=torch.bfloat16, kv_cache_dtype=torch.bfloat16, head_size=128)
    assert not supports(dtype=torch.float64)
    assert not supports(dtype=torch.float16, head_size=512)
    if not HAS_ROCM:
        assert load_target(entry.spec.is_available)() in (
            torch_build_problem(),
            "triton is not installed: ROCm builds of torch bring pytorch-triton-rocm")


@needs_install
def test_attention_backend_registration() -> None:
    from pagoda.attention import AttentionConfig
    from pagoda.plugins import get_registries, load_target
    from pagoda_rocm.attention import RocmTritonAttentionBackend, RocmTritonAttentionImpl

    [entry] = [e for e in get_registries().attention_backends if e.plugin == "rocm"]
    backend = load_target(entry.spec.backend)
    assert backend is RocmTritonAttentionBackend and backend.name == "triton"
    assert entry.spec.platforms == ("rocm",)
    assert backend.get_impl_cls() is RocmTritonAttentionImpl
    assert backend.supports_graph_capture  # reads only the metadata's tensors
    config = AttentionConfig(num_heads=64, num_kv_heads=8, head_size=128, dtype=torch.bfloat16,
                             kv_cache_dtype=torch.bfloat16, block_size=16)
    assert backend.validate(config) == []
    from pagoda.attention.selector import select_attention_backend

    platform = RocmPlatform.__new__(RocmPlatform)  # selection reads only class data
    assert select_attention_backend(platform, config) is RocmTritonAttentionBackend


@pytest.mark.parametrize("arch", ["gfx942", "gfx950", "gfx1201"])
def test_kernels_compile_for_amd_gpus_without_spills(arch: str) -> None:
    """Every kernel variant compiles to an AMD code object with ROCm's launch parameters,
    and (but for float32 attention on RDNA4) uses no scratch memory for spilled registers."""
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = Path(__file__).with_name("compile_rocm.py")
    result = subprocess.run([sys.executable, str(script), arch], capture_output=True,
                            text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines and all(line.startswith("ok ") for line in lines), lines
    spilling = [line.split(":")[0] for line in lines if "scratch=0 " not in line]
    assert spilling == (["ok attention fp32 (ieee dot)"] if arch == "gfx1201" else []), lines
    warps = "num_warps=8" if arch == "gfx1201" else "num_warps=4"
    assert all(warps in line for line in lines if line.startswith("ok attention")), lines
