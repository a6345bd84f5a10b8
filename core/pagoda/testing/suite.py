"""The ready-made conformance suite for a platform plugin.

Import it into a test module of a package that uses `pagoda.testing.pytest_plugin`::

    from pagoda.testing.suite import *  # noqa: F401,F403

Every kernel provider and attention backend that runs on the platform is compared with
core's references in each dtype the platform supports; the platform's own description is
checked for consistency.
"""

from __future__ import annotations

import json

import pytest
import torch

from pagoda.ops.registry import OpTable
from pagoda.platforms.platform import Platform
from pagoda.plugins.manager import get_registries
from pagoda.testing.attention_conformance import check_attention_backend
from pagoda.testing.op_conformance import check_kernel_provider
from pagoda.testing.providers import BackendEntry, ProviderEntry
from pagoda.testing.report import ConformanceReport

__all__ = [
    "test_attention_backend_matches_reference",
    "test_kernel_provider_matches_reference",
    "test_ops_resolve",
    "test_platform_describes_itself",
    "test_platform_memory_is_consistent",
    "test_preferred_attention_backends_are_registered",
]


def _skip_unsupported(platform: Platform, dtype: torch.dtype) -> None:
    if dtype not in platform.supported_dtypes:
        pytest.skip(f"platform {platform.name!r} does not support {dtype}")


def _settle(report: ConformanceReport) -> None:
    report.raise_for_failures()
    if not report.checked:
        pytest.skip(f"{report.subject}: every case declined: {report.skipped}")


def test_kernel_provider_matches_reference(
    pagoda_kernel_provider: ProviderEntry, pagoda_dtype: torch.dtype, pagoda_platform: Platform,
    pagoda_device: torch.device, pagoda_seed: int,
) -> None:
    _skip_unsupported(pagoda_platform, pagoda_dtype)
    entry = pagoda_kernel_provider
    _settle(check_kernel_provider(entry.provider, pagoda_dtype, plugin=entry.plugin,
                                  device=pagoda_device, seed=pagoda_seed))


def test_attention_backend_matches_reference(
    pagoda_attention_backend: BackendEntry, pagoda_dtype: torch.dtype,
    pagoda_platform: Platform, pagoda_device: torch.device, pagoda_seed: int,
) -> None:
    _skip_unsupported(pagoda_platform, pagoda_dtype)
    _settle(check_attention_backend(pagoda_attention_backend.load(), pagoda_dtype,
                                    device=pagoda_device, seed=pagoda_seed))


def test_ops_resolve(pagoda_platform: Platform, pagoda_dtype: torch.dtype) -> None:
    """Every core op has a usable provider on the platform (the reference at worst)."""
    _skip_unsupported(pagoda_platform, pagoda_dtype)
    table = OpTable(pagoda_platform.name, dtype=pagoda_dtype)
    assert all(callable(getattr(table, op)) for op in table.providers)


def test_platform_describes_itself(pagoda_platform_name: str, pagoda_platform: Platform) -> None:
    p = pagoda_platform
    assert p.name == pagoda_platform_name
    assert p.supported_dtypes and all(isinstance(d, torch.dtype) for d in p.supported_dtypes)
    assert p.distributed_backend
    assert p.device_count() >= 1
    assert p.torch_device(0).type == p.device_type
    described = json.loads(json.dumps(p.describe()))
    assert described["name"] == p.name
    assert len(described["devices"]) == p.device_count()


def test_platform_memory_is_consistent(pagoda_platform: Platform) -> None:
    mem = pagoda_platform.memory_info(0)
    assert 0 < mem.available <= mem.total


def test_preferred_attention_backends_are_registered(pagoda_platform: Platform) -> None:
    backends = get_registries().attention_backends
    for name in pagoda_platform.preferred_attention_backends:
        assert name in backends, f"preferred backend {name!r} is not registered"
        assert backends.get(name).runs_on(pagoda_platform.name)
