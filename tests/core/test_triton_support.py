"""The shared Triton kernels' providers: which platforms they serve (`TritonAvailability`,
checked in order: Triton, the platform's own condition, a device torch sees) and what they
support, for every platform that registers them."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from pagoda.kernels.triton_providers import TRITON_OPS, TritonAvailability, triton_kernel_providers
from pagoda.kernels.triton_support import supports
from pagoda.plugins import load_target

# Found, not imported: Triton must be imported after TRITON_INTERPRET is chosen (conftests).
pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                reason="the checks below assume Triton is installed")


def no_driver() -> str:
    return "the Bolt driver is too old"


def test_a_device_torch_sees_makes_them_available() -> None:
    assert TritonAvailability("cpu", install_triton="pip install triton",
                              no_device="no CPU is visible to torch")() is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible")
def test_no_device_is_the_reason() -> None:
    check = TritonAvailability("cuda", install_triton="pip install triton",
                               no_device="no CUDA device is visible to torch")
    assert check() == "no CUDA device is visible to torch"


def test_the_platform_condition_comes_before_the_device() -> None:
    check = TritonAvailability("cpu", install_triton="pip install triton",
                               no_device="no CPU is visible to torch", platform_check=no_driver)
    assert check() == "the Bolt driver is too old"


def test_supported_dtypes_and_head_sizes() -> None:
    assert supports() and supports(dtype=torch.bfloat16, kv_cache_dtype=torch.float16,
                                   head_size=256, num_heads=32)
    assert not supports(dtype=torch.float64)
    assert not supports(dtype=torch.float32, kv_cache_dtype=torch.float8_e4m3fn)
    assert not supports(head_size=257)


def test_one_provider_per_op() -> None:
    check = TritonAvailability("xpu", install_triton="x", no_device="y")
    providers = triton_kernel_providers("bolt", check, module="bolt_ops", priority=7)
    assert [p.op for p in providers] == list(TRITON_OPS)
    for provider in providers:
        assert (provider.name, provider.impl, provider.platforms, provider.priority) == (
            "triton", f"bolt_ops:{provider.op}", ("bolt",), 7)
        assert provider.is_available is check
        assert load_target(provider.supports) is supports
