"""pagoda-xpu on a machine without an Intel GPU: the registration (plugins list, --device
error, op fallback, the ipex backend only where IPEX is installed), the distributed
backend choice, and the IPEX backend's metadata and validation. IPEX's kernels and the
Triton kernels on XPU do not run here."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata

import pytest
import torch

pytest.importorskip("pagoda_xpu", reason="pagoda-xpu is not installed")

from pagoda.attention import AttentionConfig, AttentionMetadata, KVCacheSpec  # noqa: E402
from pagoda.kernels.triton_providers import TRITON_OPS  # noqa: E402
from pagoda.ops import OPS, OpTable  # noqa: E402
from pagoda_xpu import plugin  # noqa: E402
from pagoda_xpu.distributed import DistributedChoice, choose_backend  # noqa: E402
from pagoda_xpu.ipex import ipex_unavailable_reason  # noqa: E402
from pagoda_xpu.ipex_attention import (  # noqa: E402
    IpexAttentionBackend,
    IpexAttentionMetadata,
    IpexMetadataBuilder,
    window_sizes,
)
from pagoda_xpu.platform import XpuPlatform  # noqa: E402

HAS_XPU = torch.xpu.is_available()
HAS_IPEX = ipex_unavailable_reason() is None


def _installed() -> bool:
    try:
        return metadata.distribution("pagoda-xpu").version == "0.1.0"
    except metadata.PackageNotFoundError:
        return False


needs_install = pytest.mark.skipif(
    not _installed(), reason="pagoda-xpu is not installed: pip install -e platforms/xpu")


@pytest.mark.parametrize(("torch_version", "xccl", "ccl", "expected"), [
    ((2, 8), True, False, DistributedChoice("xccl", "torch 2.8 has the xccl backend", True)),
    ((2, 9), True, True, DistributedChoice("xccl", "torch 2.9 has the xccl backend", True)),
    ((2, 7), False, True,
     DistributedChoice("ccl", "oneccl_bindings_for_pytorch is installed", True)),
    ((2, 8), False, True,
     DistributedChoice("ccl", "oneccl_bindings_for_pytorch is installed", True)),
    ((2, 7), True, False,  # an xccl flag from a torch before 2.8 is not trusted
     DistributedChoice("ccl", "torch 2.7 predates xccl (2.8); pip install "
                              "oneccl_bindings_for_pytorch for multi-GPU runs", False)),
    ((2, 13), False, False,
     DistributedChoice("xccl", "torch 2.13 is built without xccl and "
                               "oneccl_bindings_for_pytorch is not installed", False)),
])
def test_distributed_backend_choice(torch_version: tuple[int, int], xccl: bool, ccl: bool,
                                    expected: DistributedChoice) -> None:
    assert choose_backend(torch_version, xccl, ccl) == expected


def test_capabilities_as_data() -> None:
    assert (XpuPlatform.name, XpuPlatform.device_type) == ("xpu", "xpu")
    assert XpuPlatform.supported_dtypes == (torch.bfloat16, torch.float16, torch.float32)
    assert XpuPlatform.graph_class == "XPUGraph"
    assert XpuPlatform.preferred_attention_backends == ("ipex", "triton", "reference")


def test_ipex_metadata_adds_cumulative_key_lengths() -> None:
    common = AttentionMetadata(
        num_tokens=7, slot_mapping=torch.arange(7), block_tables=torch.zeros(3, 4, dtype=torch.int32),
        query_start_loc=torch.tensor([0, 5, 6, 7], dtype=torch.int32),
        seq_lens=torch.tensor([5, 33, 0], dtype=torch.int32),
        query_start_loc_cpu=[0, 5, 6, 7], seq_lens_cpu=[5, 33, 0], max_query_len=5,
        max_seq_len=33)
    spec = KVCacheSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=torch.bfloat16)
    built = IpexMetadataBuilder(spec, torch.device("cpu")).build(common)
    assert isinstance(built, IpexAttentionMetadata)
    assert built.cu_seqlens_k.tolist() == [0, 5, 38, 38]
    assert built.cu_seqlens_k.dtype == torch.int32
    assert built.seq_lens is common.seq_lens and built.max_query_len == 5


@pytest.mark.parametrize(("window", "sizes"), [(None, (-1, -1)), (4096, (4095, 0)), (1, (0, 0))])
def test_window_sizes(window: int | None, sizes: tuple[int, int]) -> None:
    assert window_sizes(window) == sizes


def test_ipex_backend_validation() -> None:
    def config(**overrides: object) -> AttentionConfig:
        fields: dict[str, object] = dict(num_heads=32, num_kv_heads=8, head_size=128,
                                         dtype=torch.bfloat16, kv_cache_dtype=torch.bfloat16,
                                         block_size=64)
        return AttentionConfig(**{**fields, **overrides})  # type: ignore[arg-type]

    missing = [] if HAS_IPEX else [ipex_unavailable_reason()]
    assert IpexAttentionBackend.validate(config()) == missing
    reasons = IpexAttentionBackend.validate(config(dtype=torch.float32, head_size=48))
    assert any(r.startswith("dtype torch.float32 not in") for r in reasons)
    assert any(r.startswith("head size 48 not in") for r in reasons)
    if not HAS_IPEX:
        assert reasons[0] == ("intel_extension_for_pytorch is not installed: its XPU wheels "
                              "come from Intel's package index, see "
                              "https://pytorch-extension.intel.com")


def test_ipex_backend_is_registered_only_with_ipex(monkeypatch: pytest.MonkeyPatch) -> None:
    from pagoda_xpu import ipex

    names = [b.name for b in plugin.plugin.pagoda_attention_backends()]
    assert names == (["triton", "ipex"] if HAS_IPEX else ["triton"])
    monkeypatch.setattr(ipex, "ipex_unavailable_reason", lambda: None)
    [_, spec] = plugin.plugin.pagoda_attention_backends()
    assert (spec.name, spec.backend, spec.platforms) == (
        "ipex", "pagoda_xpu.ipex_attention:IpexAttentionBackend", ("xpu",))


@needs_install
def test_listed_by_pagoda_plugins() -> None:
    result = subprocess.run([sys.executable, "-m", "pagoda.cli.main", "plugins", "--json"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    rec = {p["name"]: p for p in report["plugins"]}["xpu"]
    assert (rec["status"], rec["distribution"], rec["version"], rec["api_version"]) == (
        "loaded", "pagoda-xpu", "0.1.0", 3)
    assert "never run" in rec["verified_on"]
    assert rec["attention_backends"] == (["triton", "ipex"] if HAS_IPEX else ["triton"])
    assert rec["kernel_providers"] == {op: ["triton"] for op in TRITON_OPS}
    [device] = rec["devices"]
    assert device["name"] == "xpu" and device["usable"] is HAS_XPU
    [backend] = [b for b in report["backends"] if b["name"] == "xpu"]
    assert backend["status"] == ("usable" if HAS_XPU else "unusable")


@needs_install
@pytest.mark.skipif(HAS_XPU, reason="an Intel GPU is visible")
def test_asking_for_xpu_without_an_intel_gpu_says_why() -> None:
    from pagoda.platforms import resolve_platform
    from pagoda.platforms.selection import DeviceError

    with pytest.raises(DeviceError, match="Device 'xpu' is installed but not usable here: "
                                          ".*(not an XPU build|no Intel GPU visible)"):
        resolve_platform("xpu")


@needs_install
@pytest.mark.skipif(HAS_XPU, reason="an Intel GPU is visible")
def test_ops_fall_back_to_the_references_without_an_intel_gpu() -> None:
    from pagoda.plugins import get_registries, load_target

    # the quantized linears have no core fallback: not offered here at all
    assert OpTable("xpu", dtype=torch.bfloat16).providers == {
        op: "core/reference" for op, spec in OPS.items() if not spec.optional}
    [entry, *_] = [e for e in get_registries().kernels if e.plugin == "xpu"]
    assert load_target(entry.spec.is_available)() in (
        "no Intel GPU is visible to torch (XPU)",
        "triton is not installed: XPU builds of torch bring pytorch-triton-xpu",
        "the installed triton has no Intel XPU backend (install pytorch-triton-xpu, which "
        "comes with XPU builds of torch, instead of PyPI's triton)")
    supports = load_target(entry.spec.supports)
    assert supports(dtype=torch.float16, head_size=256)
    assert not supports(dtype=torch.float64)


def test_decisions_from_what_is_installed() -> None:
    """Graph capture and the distributed backend follow this torch (no device is opened)."""
    import importlib.util

    import torch.distributed as dist

    platform = XpuPlatform()
    assert platform.supports_graph_capture is hasattr(torch.xpu, "XPUGraph")
    assert (platform.graph_capture() is None) is not platform.supports_graph_capture
    major, minor = (int(p) for p in torch.__version__.split(".")[:2])
    expected = choose_backend((major, minor), dist.is_xccl_available(),
                              importlib.util.find_spec("oneccl_bindings_for_pytorch") is not None)
    assert (platform.distributed_backend, platform.distributed_backend_reason) == (
        expected.backend, expected.reason)


@needs_install
def test_attention_backend_selection() -> None:
    from pagoda.attention.selector import select_attention_backend
    from pagoda.kernels.triton.backend import TritonAttentionBackend

    config = AttentionConfig(num_heads=32, num_kv_heads=8, head_size=128, dtype=torch.bfloat16,
                             kv_cache_dtype=torch.bfloat16, block_size=64)
    expected = IpexAttentionBackend if HAS_IPEX else TritonAttentionBackend
    assert select_attention_backend(XpuPlatform(), config) is expected
