"""Choosing the attention backend on `cpu`: the platform's preference (whatever the window or
soft cap), and forced names that cannot be used say why."""

from __future__ import annotations

import pytest
import torch

from pagoda.attention import AttentionConfig
from pagoda.attention.selector import AttentionBackendError, select_attention_backend
from pagoda.platforms import Platform, resolve_platform


@pytest.fixture(scope="module")
def cpu() -> Platform:
    return resolve_platform("cpu")


def _config(**overrides: object) -> AttentionConfig:
    fields: dict[str, object] = dict(num_heads=8, num_kv_heads=2, head_size=64,
                                     dtype=torch.bfloat16, kv_cache_dtype=torch.bfloat16,
                                     block_size=16)
    fields.update(overrides)
    return AttentionConfig(**fields)  # type: ignore[arg-type]


def test_prefers_cpu_sdpa(cpu: Platform) -> None:
    assert select_attention_backend(cpu, _config()).name == "cpu_sdpa"
    assert select_attention_backend(cpu, _config(sliding_window=128)).name == "cpu_sdpa"
    assert select_attention_backend(cpu, _config(logits_soft_cap=30.0)).name == "cpu_sdpa"


def test_forced_backend_that_cannot_serve_lists_reasons(cpu: Platform) -> None:
    config = _config(num_heads=6, num_kv_heads=4, dtype=torch.float64)
    with pytest.raises(AttentionBackendError) as err:
        select_attention_backend(cpu, config, forced="cpu_sdpa")
    msg = str(err.value)
    assert msg.startswith("Attention backend 'cpu_sdpa' cannot be used: ")
    assert "6 heads not divisible by 4 kv heads" in msg
    assert "dtype torch.float64 not in" in msg


def test_forced_backend_that_can_serve(cpu: Platform) -> None:
    config = _config(logits_soft_cap=30.0)
    assert select_attention_backend(cpu, config, forced="reference").name == "reference"


def test_forced_unknown_backend_lists_registered(cpu: Platform) -> None:
    with pytest.raises(AttentionBackendError) as err:
        select_attention_backend(cpu, _config(), forced="flash_attn")
    msg = str(err.value)
    assert msg.startswith("Unknown attention backend 'flash_attn' (registered: ")
    assert all(name in msg for name in ("cpu_sdpa", "reference", "template"))


def test_forced_backend_of_another_platform(cpu: Platform) -> None:
    with pytest.raises(AttentionBackendError,
                       match="'template' does not run on platform 'cpu' .*supports template"):
        select_attention_backend(cpu, _config(), forced="template")


def test_no_backend_can_serve(cpu: Platform) -> None:
    with pytest.raises(AttentionBackendError) as err:
        select_attention_backend(cpu, _config(num_heads=6, num_kv_heads=4))
    msg = str(err.value)
    assert msg.startswith("No attention backend on 'cpu' can serve this model: ")
    for name in ("cpu_sdpa", "reference"):
        assert f"{name}: 6 heads not divisible by 4 kv heads" in msg
