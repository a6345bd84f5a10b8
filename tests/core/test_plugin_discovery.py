"""`pagoda plugins` discovers the installed plugins through their real entry points."""

from __future__ import annotations

from importlib import metadata
from typing import Any

import pytest
from cli_harness import by_name, run_pagoda

from pagoda.ops import OPS
from pagoda.plugins import PLUGIN_API_VERSION

INSTALLED = {  # entry point -> distribution
    "cpu": "pagoda-cpu",
    "template": "pagoda-plugin-template",
    "server": "pagoda-server",
}


@pytest.fixture(scope="module")
def report() -> dict[str, dict[str, Any]]:
    result = run_pagoda("plugins", "--json")
    assert result.returncode == 0, result.stderr
    return by_name(result.json())


@pytest.mark.parametrize("name", ["core", *INSTALLED])
def test_installed_plugin_loads_with_versions(report: dict[str, dict[str, Any]], name: str) -> None:
    dist = INSTALLED.get(name, "pagoda")
    rec = report[name]
    assert rec["status"] == "loaded", rec["error"]
    assert rec["distribution"] == dist
    assert rec["version"] == metadata.version(dist)
    assert rec["api_version"] == PLUGIN_API_VERSION
    assert rec["error"] is None and rec["traceback"] is None


def test_core_registers_references_and_commands(report: dict[str, dict[str, Any]]) -> None:
    core = report["core"]
    assert core["attention_backends"] == ["reference"]
    assert core["kernel_providers"] == {op: ["reference"] for op in OPS}
    assert {"plugins", "collect-env"} <= set(core["cli_subcommands"])
    assert core["devices"] == []


@pytest.mark.parametrize(
    ("name", "score", "backend", "provider"),
    [("cpu", 10, "cpu_sdpa", "cpu_native"), ("template", 1, "template", "template")],
)
def test_platform_plugin_registers_device_backend_kernels(
    report: dict[str, dict[str, Any]], name: str, score: int, backend: str, provider: str
) -> None:
    rec = report[name]
    [device] = rec["devices"]
    assert (device["name"], device["usable"], device["score"]) == (name, True, score)
    assert device["devices"] and device["reason"] is None
    assert rec["attention_backends"] == [backend]
    assert rec["kernel_providers"] == {op: [provider] for op in OPS}


def test_text_listing_names_each_plugin_and_version() -> None:
    result = run_pagoda("plugins")
    assert result.returncode == 0, result.stderr
    for name, dist in INSTALLED.items():
        version = metadata.version(dist)
        assert f"{name}  ({dist} {version}, plugin API {PLUGIN_API_VERSION})  [loaded]" in (
            result.stdout)
    assert "device cpu: usable, score 10" in result.stdout


def test_allow_list_shows_others_as_disabled() -> None:
    result = run_pagoda("plugins", "--json", PAGODA_PLUGINS="template")
    assert result.returncode == 0, result.stderr
    listing = by_name(result.json())
    assert listing["cpu"]["status"] == "disabled"
    assert listing["cpu"]["error"] == "not in PAGODA_PLUGINS=template"
    assert listing["cpu"]["devices"] == [] and listing["cpu"]["kernel_providers"] == {}
    assert listing["template"]["status"] == listing["core"]["status"] == "loaded"
