"""pagoda-gaudi on a machine without a Gaudi card or SDK: the registration (plugins list,
--device error, op fallback), the backend's checks, and the glue around
Gaudi's fused kernels run on the CPU with torch's own SDPA and RMSNorm standing in for
FusedSDPA and FusedRMSNorm. The fused kernels themselves do not run here."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("pagoda_gaudi", reason="pagoda-gaudi is not installed")

from pagoda.attention import AttentionConfig  # noqa: E402
from pagoda.ops import OPS, OpTable  # noqa: E402
from pagoda.platforms import MemoryInfo  # noqa: E402
from pagoda.testing import check_attention_backend, check_op  # noqa: E402
from pagoda_gaudi import attention, kernels  # noqa: E402
from pagoda_gaudi.attention import FusedSdpaAttentionBackend, attention_mask  # noqa: E402
from pagoda_gaudi.platform import GaudiPlatform  # noqa: E402
from pagoda_gaudi.plugin import FUSED_OPS  # noqa: E402
from pagoda_gaudi.sdk import sdk_unavailable_reason  # noqa: E402

HAS_GAUDI = sdk_unavailable_reason() is None


def _installed() -> bool:
    try:
        return metadata.distribution("pagoda-gaudi").version == "0.1.0"
    except metadata.PackageNotFoundError:
        return False


needs_install = pytest.mark.skipif(
    not _installed(), reason="pagoda-gaudi is not installed: pip install -e platforms/gaudi")
no_gaudi = pytest.mark.skipif(HAS_GAUDI, reason="a Gaudi card is visible")


def test_capabilities_as_data() -> None:
    assert (GaudiPlatform.name, GaudiPlatform.device_type) == ("gaudi", "hpu")
    assert GaudiPlatform.supported_dtypes == (torch.bfloat16, torch.float32)
    assert GaudiPlatform.distributed_backend == "hccl"
    assert GaudiPlatform.supports_graph_capture
    assert GaudiPlatform.preferred_attention_backends[0] == "fused_sdpa"
    assert not FusedSdpaAttentionBackend.supports_graph_capture  # host-side sequence loop
    gib = 2**30
    budget = GaudiPlatform.default_kv_cache_bytes(GaudiPlatform.__new__(GaudiPlatform),
                                                  MemoryInfo(96 * gib, 80 * gib))
    assert budget == int(96 * gib * 0.9) - 16 * gib


@no_gaudi
def test_the_sdk_pieces_say_why_they_are_missing() -> None:
    reason = sdk_unavailable_reason()
    assert reason == ("habana_frameworks (the Intel Gaudi PyTorch bridge) is not installed: it "
                      "comes with the Intel Gaudi software stack, not from PyPI")
    config = AttentionConfig(num_heads=32, num_kv_heads=8, head_size=128, dtype=torch.bfloat16,
                             kv_cache_dtype=torch.bfloat16, block_size=128, logits_soft_cap=30.0)
    assert FusedSdpaAttentionBackend.validate(config) == [
        reason, "logits soft-capping is not supported"]
    with pytest.raises(ImportError):
        kernels.rms_norm(torch.ones(2, 8), torch.ones(8), 1e-6)


def test_attention_mask() -> None:
    assert attention_mask(1, 9, None, torch.float32, torch.device("cpu")) is None
    assert attention_mask(1, 9, 16, torch.float32, torch.device("cpu")) is None
    visible = attention_mask(3, 5, None, torch.float32, torch.device("cpu")) == 0
    assert visible.tolist() == [[True, True, True, False, False],
                                [True, True, True, True, False],
                                [True, True, True, True, True]]
    window = attention_mask(1, 5, 2, torch.float32, torch.device("cpu")) == 0
    assert window.tolist() == [[False, False, False, True, True]]


def _torch_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                scale: float) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_paged_attention_glue_with_torch_sdpa_standing_in(
        dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache writes, per-sequence gathering, GQA and masks around FusedSDPA, checked by
    core's conformance kit (mixed prefill/decode, chunked prefill, sliding window)."""
    monkeypatch.setattr(attention, "fused_sdpa_call", _torch_sdpa)
    monkeypatch.setattr(attention, "sdk_unavailable_reason", lambda: None)
    report = check_attention_backend(FusedSdpaAttentionBackend, dtype, seed=5)
    report.raise_for_failures()
    assert report.checked
    assert all("soft" in s for s in report.skipped), report.skipped


class _TorchRmsNorm:
    @staticmethod
    def apply(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        assert x.dim() == 3 and weight.dtype == x.dtype  # what FusedRMSNorm is given
        normed = F.rms_norm(x.float(), (x.shape[-1],), weight.float(), eps)
        return normed.to(x.dtype)


@pytest.mark.parametrize("op", FUSED_OPS)
def test_rms_norm_glue_with_torch_standing_in(op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "fused_rms_norm", lambda: _TorchRmsNorm)
    for dtype in (torch.float32, torch.bfloat16):
        report = check_op(op, getattr(kernels, op), dtype, seed=6)
        report.raise_for_failures()
        assert report.checked


def test_kernel_checks() -> None:
    assert kernels.supports(dtype=torch.bfloat16) and kernels.supports()
    assert not kernels.supports(dtype=torch.float16)


@needs_install
def test_listed_by_pagoda_plugins() -> None:
    result = subprocess.run([sys.executable, "-m", "pagoda.cli.main", "plugins", "--json"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    rec = {p["name"]: p for p in report["plugins"]}["gaudi"]
    assert (rec["status"], rec["distribution"], rec["version"], rec["api_version"]) == (
        "loaded", "pagoda-gaudi", "0.1.0", 3)
    assert "nothing with a Gaudi card" in rec["verified_on"]
    assert rec["attention_backends"] == ["fused_sdpa"]
    assert rec["kernel_providers"] == {op: ["fused"] for op in FUSED_OPS}
    [device] = rec["devices"]
    assert device["name"] == "gaudi" and device["usable"] is HAS_GAUDI
    [backend] = [b for b in report["backends"] if b["name"] == "gaudi"]
    assert backend["status"] == ("usable" if HAS_GAUDI else "unusable")


@needs_install
@no_gaudi
def test_asking_for_gaudi_without_a_card_says_why() -> None:
    from pagoda.platforms import resolve_platform
    from pagoda.platforms.selection import DeviceError

    with pytest.raises(DeviceError, match="Device 'gaudi' is installed but not usable here: "
                                          "habana_frameworks .* is not installed"):
        resolve_platform("gaudi")


@needs_install
@no_gaudi
def test_ops_fall_back_to_the_references_without_the_sdk() -> None:
    # the quantized linears have no core fallback: not offered here at all
    assert OpTable("gaudi", dtype=torch.bfloat16).providers == {
        op: "core/reference" for op, spec in OPS.items() if not spec.optional}


@needs_install
@no_gaudi
def test_without_the_sdk_attention_selection_names_the_reason() -> None:
    from pagoda.attention.reference import ReferenceAttentionBackend
    from pagoda.attention.selector import AttentionBackendError, select_attention_backend

    config = AttentionConfig(num_heads=32, num_kv_heads=8, head_size=128, dtype=torch.bfloat16,
                             kv_cache_dtype=torch.bfloat16, block_size=128)
    platform = GaudiPlatform.__new__(GaudiPlatform)  # selection reads only class data
    assert select_attention_backend(platform, config) is ReferenceAttentionBackend
    with pytest.raises(AttentionBackendError, match="'fused_sdpa' cannot be used: "
                                                    "habana_frameworks .* is not installed"):
        select_attention_backend(platform, config, forced="fused_sdpa")
