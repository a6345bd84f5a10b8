"""pagoda-cuda on any machine: the probe says why CUDA is unusable (without importing torch
or initialising CUDA), the plugin registers its Triton kernels and backend, and the
pieces that need no GPU (device listing, visibility, KV cache sizing) are right."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import torch

pytest.importorskip("pagoda_cuda", reason="pagoda-cuda is not installed")

from pagoda.kernels.triton_providers import TRITON_OPS, TRITON_QUANT_OPS  # noqa: E402
from pagoda.ops import OPS, OpTable  # noqa: E402
from pagoda.plugins import get_registries, load_target  # noqa: E402
from pagoda.plugins.specs import QUANT_INPUT_OPS  # noqa: E402
from pagoda_cuda import nvml, probe  # noqa: E402
from pagoda_cuda.nvml import GpuInfo, driver_gpus, proc_gpus, visible_gpus  # noqa: E402

HAS_GPU = torch.cuda.is_available()


def _installed() -> bool:
    try:
        return metadata.distribution("pagoda-cuda").version == "0.1.0"
    except metadata.PackageNotFoundError:
        return False


needs_install = pytest.mark.skipif(
    not _installed(), reason="pagoda-cuda is not installed: pip install -e platforms/cuda")

PROBE = """
import json, sys
from pagoda_cuda.probe import probe
p = probe()
print(json.dumps({"usable": p.usable, "score": p.score, "devices": list(p.devices),
                  "reason": p.reason, "torch_imported": "torch" in sys.modules}))
"""


def test_probe_imports_no_torch_and_says_why() -> None:
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["torch_imported"] is False  # so no CUDA initialisation either
    if HAS_GPU:
        assert found["usable"] and found["score"] == 100 and found["devices"]
        assert found["reason"] is None
        return
    assert not found["usable"] and found["reason"]
    if torch.version.cuda is None:
        assert f"torch {torch.__version__} is built without CUDA" in found["reason"]


@needs_install
def test_listed_by_pagoda_plugins() -> None:
    result = subprocess.run([sys.executable, "-m", "pagoda.cli.main", "plugins", "--json"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    rec = {p["name"]: p for p in json.loads(result.stdout)["plugins"]}["cuda"]
    assert (rec["status"], rec["distribution"], rec["version"]) == ("loaded", "pagoda-cuda",
                                                                    "0.1.0")
    assert rec["attention_backends"] == ["triton"]
    assert rec["kernel_providers"] == {op: ["triton"] for op in (*TRITON_OPS, *TRITON_QUANT_OPS)
                                       } | {"woq_linear": ["cuda_native", "triton"],
                                            "fp8_linear": ["cuda_native", "triton"],
                                            "all_reduce": ["cuda_symm_mem"]}
    [device] = rec["devices"]
    assert device["name"] == "cuda" and device["usable"] is HAS_GPU
    assert (device["reason"] is None) is HAS_GPU


@needs_install
@pytest.mark.skipif(HAS_GPU, reason="a GPU is visible")
def test_asking_for_cuda_without_a_gpu_says_why() -> None:
    from pagoda.platforms import resolve_platform
    from pagoda.platforms.selection import DeviceError

    with pytest.raises(DeviceError, match="Device 'cuda' is installed but not usable here: "):
        resolve_platform("cuda")


@needs_install
def test_ops_resolve_to_triton_only_with_a_gpu() -> None:
    """Without a GPU the quantized linears are not offered at all (core has no fallback)."""
    table = OpTable("cuda", dtype=torch.bfloat16)
    triton = "cuda/triton" if HAS_GPU else "core/reference"
    required = {op: triton if op in TRITON_OPS else "core/reference"
                for op, spec in OPS.items() if not spec.optional}
    if HAS_GPU:
        from pagoda_cuda import fp8_ops
        from pagoda_cuda.native import unavailable

        native = {"woq_linear": "cuda/cuda_native"} if unavailable() is None else {}
        if fp8_ops.unavailable() is None:
            native["fp8_linear"] = "cuda/cuda_native"
        assert table.providers == {
            **required, **dict.fromkeys((*TRITON_QUANT_OPS, *QUANT_INPUT_OPS), triton), **native}
    else:
        assert table.providers == required
        assert set(table.missing) == {*TRITON_QUANT_OPS, *QUANT_INPUT_OPS}


@needs_install
def test_registered_targets_are_the_shared_kernels() -> None:
    """Each provider is a shared kernel, launched with CUDA's parameters."""
    pytest.importorskip("triton")
    from pagoda.kernels import triton as kernels
    from pagoda.kernels.triton import quant_linear

    names = set()
    for entry in get_registries().kernels:
        if entry.plugin == "cuda":
            names.add((entry.spec.op, entry.spec.name))
            if entry.spec.name in ("cuda_native", "cuda_symm_mem"):  # csrc; PyTorch's
                continue
            shared = quant_linear if entry.spec.op in TRITON_QUANT_OPS else kernels
            impl = load_target(entry.spec.impl)
            assert impl.__wrapped__ is getattr(shared, entry.spec.op)
            assert load_target(entry.spec.supports)(dtype=torch.bfloat16, head_size=128)
            assert not load_target(entry.spec.supports)(dtype=torch.float64)
            if entry.spec.op in TRITON_QUANT_OPS:
                assert entry.spec.prepare is not None
                assert (entry.spec.quantized_input is None) == (entry.spec.op == "woq_linear")
            else:
                assert not load_target(entry.spec.supports)(dtype=torch.float16, head_size=512)
    assert {name for _, name in names} == {"triton", "cuda_native", "cuda_symm_mem"}
    assert {op for op, name in names if name == "cuda_native"} == {"woq_linear", "fp8_linear"}


H200 = GpuInfo("NVIDIA H200", "GPU-1111aaaa-0000", 143_771 * 2**20)
L4 = GpuInfo("NVIDIA L4", "GPU-2222bbbb-0000", 23_034 * 2**20)


@pytest.mark.parametrize(("env", "expected"), [
    (None, [H200, L4]),
    ("1", [L4]),
    ("1,0", [L4, H200]),
    ("GPU-2222", [L4]),
    ("0,7,1", [H200]),  # CUDA stops at the first invalid entry
    ("", []),
    ("-1", []),
])
def test_visible_devices(env: str | None, expected: list[GpuInfo]) -> None:
    assert visible_gpus([H200, L4], env) == expected


def test_device_description() -> None:
    assert H200.describe() == "NVIDIA H200 (140 GiB)"
    assert GpuInfo("NVIDIA A100", "GPU-x").describe() == "NVIDIA A100"


def test_driver_files(tmp_path: Path) -> None:
    proc, dev = tmp_path / "proc" / "gpus", tmp_path / "dev"
    dev.mkdir()
    assert proc_gpus(proc) is None and driver_gpus(proc, dev) is None
    for node in ("nvidiactl", "nvidia0", "nvidia1", "nvidia-uvm"):
        (dev / node).touch()
    assert driver_gpus(proc, dev) == ([GpuInfo("NVIDIA GPU", "")] * 2, f"{dev}/nvidia*")
    gpu = proc / "0000:19:00.0"
    gpu.mkdir(parents=True)
    (gpu / "information").write_text(
        "Model: \t\t NVIDIA H200\nIRQ:   \t\t 35\nGPU UUID: \t GPU-1111aaaa-0000\n")
    assert driver_gpus(proc, dev) == ([GpuInfo("NVIDIA H200", "GPU-1111aaaa-0000")],
                                      str(tmp_path / "proc"))


def test_reasons_when_gpus_are_missing_or_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_nvml() -> list[GpuInfo]:
        raise nvml.NvmlError("libnvidia-ml.so.1 cannot be loaded")

    monkeypatch.setattr(probe, "nvml_gpus", no_nvml)
    monkeypatch.setattr(probe, "driver_gpus", lambda: None)
    assert probe.find_gpus() == ([], "no NVIDIA driver found (libnvidia-ml.so.1 cannot be "
                                     "loaded; no /proc/driver/nvidia or /dev/nvidia*)")
    monkeypatch.setattr(probe, "driver_gpus", lambda: ([], "/dev/nvidia*"))
    assert probe.find_gpus() == ([], "the NVIDIA driver reports no GPU (/dev/nvidia*)")
    monkeypatch.setattr(probe, "nvml_gpus", lambda: [H200])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert probe.find_gpus() == ([], "CUDA_VISIBLE_DEVICES='' hides all 1 GPUs")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert probe.find_gpus() == ([H200], None)


def test_triton_backend_validation() -> None:
    pytest.importorskip("triton")
    from pagoda.attention import AttentionConfig
    from pagoda.kernels.triton.backend import TritonAttentionBackend

    def config(**overrides: object) -> AttentionConfig:
        fields: dict[str, object] = dict(num_heads=32, num_kv_heads=8, head_size=128,
                                         dtype=torch.bfloat16, kv_cache_dtype=torch.bfloat16,
                                         block_size=16)
        return AttentionConfig(**{**fields, **overrides})  # type: ignore[arg-type]

    assert TritonAttentionBackend.validate(config()) == []
    assert TritonAttentionBackend.validate(config(head_size=80, block_size=5,
                                                  sliding_window=4096,
                                                  logits_soft_cap=30.0)) == []
    reasons = TritonAttentionBackend.validate(config(head_size=512, dtype=torch.float64))
    assert "head size 512 is outside 1..256" in reasons
    assert any(r.startswith("dtype torch.float64 not in") for r in reasons)
