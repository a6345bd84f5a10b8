"""Registries are keyed by name, ordered by priority, filtered by platform; lazy targets
load by "module:attr"."""

from __future__ import annotations

import os.path

import pytest

from pagoda.plugins import AttentionBackendSpec, load_target
from pagoda.plugins.registry import Registry


def _registry() -> Registry[AttentionBackendSpec]:
    reg: Registry[AttentionBackendSpec] = Registry("attention backend", lambda s: s.name)
    reg.add(AttentionBackendSpec("flash", "x:A", ("cuda",), priority=5), "cuda")
    reg.add(AttentionBackendSpec("flash", "x:B", ("cuda", "rocm"), priority=9), "fork")
    reg.add(AttentionBackendSpec("reference", "x:C", priority=-100), "core")
    reg.add(AttentionBackendSpec("sdpa", "x:D", ("cpu",)), "cpu")
    return reg


def test_highest_priority_first() -> None:
    reg = _registry()
    assert reg.get("flash").plugin == "fork"
    assert [e.plugin for e in reg.candidates("flash")] == ["fork", "cuda"]
    assert reg.names() == ["flash", "reference", "sdpa"]
    assert "flash" in reg and "nope" not in reg


def test_unknown_name_lists_known() -> None:
    with pytest.raises(KeyError, match=r"No attention backend named 'nope' is registered "
                                       r"\(known: flash, reference, sdpa\)"):
        _registry().get("nope")


@pytest.mark.parametrize(
    ("platform", "expected"),
    [("cuda", ["fork", "cuda", "core"]), ("rocm", ["fork", "core"]), ("cpu", ["cpu", "core"]),
     ("tpu", ["core"])],
)
def test_for_platform_filters_and_orders(platform: str, expected: list[str]) -> None:
    assert [e.plugin for e in _registry().for_platform(platform)] == expected


def test_load_target() -> None:
    assert load_target("os.path:join") is os.path.join
    assert load_target("pagoda.plugins.registry:Registry.get") is Registry.get
    marker = object()
    assert load_target(marker) is marker


@pytest.mark.parametrize("bad", ["os.path.join", ":join", "os.path:"])
def test_load_target_rejects_malformed(bad: str) -> None:
    with pytest.raises(ValueError, match="Expected 'package.module:attribute'"):
        load_target(bad)
