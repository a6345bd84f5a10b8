"""The ready-made conformance suite for a platform plugin.

Import it into a test module of a package that uses `pagoda.testing.pytest_plugin`::

    from pagoda.testing.suite import *  # noqa: F401,F403

Every kernel provider and attention backend registered to run on the platform is compared
with core's references in each dtype the platform supports (a backend that lists the fp8 KV
cache also with one) (core's own references too,
unless the platform's device is the host, where they would meet themselves); a tiny model generates the same
greedy tokens on the platform as on the CPU; the platform's own description is checked for
consistency, and every installed plugin must have loaded (a broken one may have taken the
platform's registrations with it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pagoda.attention.backend import FP8_KV_CACHE_DTYPE
from pagoda.attention.reference import ReferenceAttentionBackend
from pagoda.ops.registry import OPS, OpTable
from pagoda.platforms.platform import Platform
from pagoda.platforms.selection import DeviceError, choose_device
from pagoda.plugins.lazy import load_target
from pagoda.plugins.manager import get_registries
from pagoda.testing.attention_conformance import check_attention_backend
from pagoda.testing.collective_conformance import COLLECTIVE_OPS
from pagoda.testing.greedy_parity import REFERENCE_DEVICE, check_greedy_parity, parity_dtype
from pagoda.testing.op_conformance import check_kernel_provider
from pagoda.testing.providers import BackendEntry, ProviderEntry
from pagoda.testing.report import ConformanceReport

__all__ = [
    "test_attention_backend_matches_reference",
    "test_every_plugin_loaded",
    "test_greedy_generation_matches_cpu",
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


def _skip_reference_on_host(subject: object, reference: object, device: torch.device) -> None:
    """The checks compare with core's reference run on the host: the reference itself on
    the host would only be compared with itself."""
    if subject is reference and device.type == "cpu":
        pytest.skip("core's reference on the host is what every check compares with")


def test_kernel_provider_matches_reference(
    pagoda_kernel_provider: ProviderEntry, pagoda_dtype: torch.dtype, pagoda_platform: Platform,
    pagoda_device: torch.device, pagoda_seed: int,
) -> None:
    _skip_unsupported(pagoda_platform, pagoda_dtype)
    entry = pagoda_kernel_provider
    op = OPS.get(entry.op)
    _skip_reference_on_host(load_target(entry.provider.impl), op and op.reference,
                            pagoda_device)
    if (entry.op in COLLECTIVE_OPS and pagoda_platform.device_count() < 2
            and pagoda_device.type != "cpu"):  # ranks on the host share it
        pytest.skip(f"{entry.op} is a collective: its check needs 2 devices, "
                    f"{pagoda_platform.name!r} shows {pagoda_platform.device_count()}")
    _settle(check_kernel_provider(entry.provider, pagoda_dtype, plugin=entry.plugin,
                                  device=pagoda_device, seed=pagoda_seed,
                                  platform=pagoda_platform.name))


def test_attention_backend_matches_reference(
    pagoda_attention_backend: BackendEntry, pagoda_dtype: torch.dtype,
    pagoda_platform: Platform, pagoda_device: torch.device, pagoda_seed: int,
) -> None:
    _skip_unsupported(pagoda_platform, pagoda_dtype)
    backend = pagoda_attention_backend.load()
    _skip_reference_on_host(backend, ReferenceAttentionBackend, pagoda_device)
    _settle(check_attention_backend(backend, pagoda_dtype, device=pagoda_device,
                                    seed=pagoda_seed))
    if FP8_KV_CACHE_DTYPE in backend.kv_cache_dtypes():  # a backend that claims fp8 caches
        check_attention_backend(backend, pagoda_dtype, device=pagoda_device, seed=pagoda_seed,
                                kv_cache_dtype=FP8_KV_CACHE_DTYPE).raise_for_failures()


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


def test_every_plugin_loaded() -> None:
    """A plugin that did not load may have taken some of the platform's kernels with it."""
    failed = [f"{r.name} ({r.distribution}) {r.status}: {r.error}"
              for r in get_registries().failed()]
    assert not failed, f"plugins that did not load: {'; '.join(failed)}"


def test_greedy_generation_matches_cpu(
    pagoda_platform: Platform, pagoda_tiny_model: Path, pagoda_seed: int
) -> None:
    try:
        choose_device(REFERENCE_DEVICE, get_registries())
    except DeviceError as exc:
        pytest.fail(f"greedy parity compares with the {REFERENCE_DEVICE!r} platform: {exc}",
                    pytrace=False)
    _settle(check_greedy_parity(pagoda_tiny_model, pagoda_platform.name,
                                parity_dtype(pagoda_platform), seed=pagoda_seed))
