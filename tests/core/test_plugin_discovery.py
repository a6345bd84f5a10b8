"""`pagoda plugins` discovers the installed plugins through their real entry points."""

from __future__ import annotations

from importlib import metadata
from typing import Any

import pytest
from cli_harness import by_name, run_pagoda

from pagoda.ops import OPS
from pagoda.plugins import OLDEST_PLUGIN_API_VERSION, PLUGIN_API_VERSION
from pagoda_cpu.plugin import CPU_CSRC_OPS, CPU_OPS
from pagoda_template.plugin import OPS as TEMPLATE_OPS

INSTALLED = {  # entry point -> distribution
    "cpu": "pagoda-cpu",
    "template": "pagoda-plugin-template",
    "server": "pagoda-server",
}


@pytest.fixture(scope="module")
def report() -> dict[str, dict[str, Any]]:
    result = run_pagoda("plugins", "--json")
    assert result.returncode == 0, result.stderr
    return by_name(result.json()["plugins"])


@pytest.mark.parametrize("name", ["core", *INSTALLED])
def test_installed_plugin_loads_with_versions(report: dict[str, dict[str, Any]], name: str) -> None:
    dist = INSTALLED.get(name, "pagoda")
    rec = report[name]
    assert rec["status"] == "loaded", rec["error"]
    assert rec["distribution"] == dist
    assert rec["version"] == metadata.version(dist)
    assert OLDEST_PLUGIN_API_VERSION <= rec["api_version"] <= PLUGIN_API_VERSION
    assert (rec["deprecation"] is None) == (rec["api_version"] == PLUGIN_API_VERSION)
    if rec["api_version"] >= 2:
        assert rec["verified_on"], "plugin API 2 requires verified_on"
    assert rec["error"] is None and rec["traceback"] is None


def test_core_is_on_the_current_api(report: dict[str, dict[str, Any]]) -> None:
    assert report["core"]["api_version"] == PLUGIN_API_VERSION
    assert report["core"]["verified_on"].startswith("no hardware of its own")


def test_core_registers_references_and_commands(report: dict[str, dict[str, Any]]) -> None:
    core = report["core"]
    assert core["attention_backends"] == ["reference"]
    assert core["kernel_providers"] == {op: ["reference"] for op, spec in OPS.items()
                                        if not spec.optional}
    assert {"plugins", "collect-env"} <= set(core["cli_subcommands"])
    assert core["devices"] == []


CPU_PROVIDERS = {op: ["cpu_native"] for op in CPU_OPS}
for _op in CPU_CSRC_OPS:
    CPU_PROVIDERS[_op] = ["cpu_csrc", *CPU_PROVIDERS.get(_op, [])]


@pytest.mark.parametrize(
    ("name", "score", "backend", "providers"),
    [("cpu", 10, "cpu_sdpa", CPU_PROVIDERS),
     ("template", 1, "template", {op: ["template"] for op in TEMPLATE_OPS})],
)
def test_platform_plugin_registers_device_backend_kernels(
    report: dict[str, dict[str, Any]], name: str, score: int, backend: str,
    providers: dict[str, list[str]],
) -> None:
    rec = report[name]
    [device] = rec["devices"]
    assert (device["name"], device["usable"], device["score"]) == (name, True, score)
    assert device["devices"] and device["reason"] is None
    assert rec["attention_backends"] == [backend]
    assert rec["kernel_providers"] == providers
    assert set(providers) <= set(OPS)


def test_text_listing_names_each_plugin_and_version(
    report: dict[str, dict[str, Any]]
) -> None:
    result = run_pagoda("plugins")
    assert result.returncode == 0, result.stderr
    for name, dist in INSTALLED.items():
        version, api = metadata.version(dist), report[name]["api_version"]
        verified = report[name]["verified_on"] or "unknown"
        assert (f"{name}  ({dist} {version}, plugin API {api})  [loaded]\n"
                f"  verified on: {verified}\n") in result.stdout
    assert "device cpu: usable, score 10" in result.stdout


def test_allow_list_shows_others_as_disabled() -> None:
    result = run_pagoda("plugins", "--json", PAGODA_PLUGINS="template")
    assert result.returncode == 0, result.stderr
    listing = by_name(result.json()["plugins"])
    assert listing["cpu"]["status"] == "disabled"
    assert listing["cpu"]["error"] == "not in PAGODA_PLUGINS=template"
    assert listing["cpu"]["devices"] == [] and listing["cpu"]["kernel_providers"] == {}
    assert listing["template"]["status"] == listing["core"]["status"] == "loaded"
