"""The template platform: built by its factory, described as data, served by its own
attention backend and kernels."""

from __future__ import annotations

import json

import pytest
import torch

from pagoda.attention import AttentionConfig
from pagoda.attention.selector import select_attention_backend
from pagoda.platforms import Platform, resolve_platform
from pagoda.plugins import OLDEST_PLUGIN_API_VERSION, PLUGIN_API_VERSION, get_registries


@pytest.fixture(scope="module")
def template() -> Platform:
    return resolve_platform("template")


def test_capabilities(template: Platform) -> None:
    assert type(template).__name__ == "TemplatePlatform"
    assert (template.name, template.device_type) == ("template", "cpu")
    assert template.supported_dtypes == (torch.float32, torch.bfloat16)
    assert template.distributed_backend == "gloo"
    assert template.device_count() == 1
    described = json.loads(json.dumps(template.describe()))
    assert described["devices"] == ["host CPU (template platform)"]
    assert described["preferred_attention_backends"] == ["template"]


def test_memory(template: Platform) -> None:
    mem = template.memory_info()
    assert mem.total > mem.available > 0


def test_probe_is_usable_below_cpu() -> None:
    probes = get_registries().probes
    assert probes.get("template").spec.usable
    assert probes.get("template").spec.score < probes.get("cpu").spec.score


@pytest.mark.parametrize("soft_cap", [None, 50.0])
def test_selects_template_backend(template: Platform, soft_cap: float | None) -> None:
    config = AttentionConfig(8, 2, 64, torch.bfloat16, torch.bfloat16, 16,
                             sliding_window=4096, logits_soft_cap=soft_cap)
    assert select_attention_backend(template, config).name == "template"


def test_targets_the_oldest_accepted_plugin_api() -> None:
    """Deliberately: the template proves that a plugin built for the previous API still
    loads and works."""
    record = get_registries().record("template")
    assert OLDEST_PLUGIN_API_VERSION == 2 < PLUGIN_API_VERSION
    assert (record.status, record.api_version) == ("loaded", OLDEST_PLUGIN_API_VERSION)
    assert record.verified_on == "the host CPU (x86-64), which is what it targets"
    assert record.deprecation and "targets plugin API 2, deprecated since API 3" in (
        record.deprecation)
