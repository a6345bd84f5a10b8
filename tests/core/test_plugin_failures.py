"""Broken plugins are reported loudly (name, reason, traceback) and never take the other
plugins down: import errors, raising hooks, a missing info hook, and plugin API versions
out of range (whose messages test_plugin_api_versions checks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cli_harness import CliResult, by_name, run_pagoda, write_plugin_distribution

from pagoda.plugins import OLDEST_PLUGIN_API_VERSION, PLUGIN_API_VERSION

TOO_NEW, TOO_OLD = PLUGIN_API_VERSION + 1, OLDEST_PLUGIN_API_VERSION - 1

BROKEN_IMPORT = """
    raise RuntimeError("vendor SDK missing: libfake.so not found")
"""

BROKEN_HOOK = """
    from pagoda.plugins import PLUGIN_API_VERSION, PluginInfo, hookimpl

    @hookimpl
    def pagoda_plugin_info():
        return PluginInfo("brokenhook", "2.3", PLUGIN_API_VERSION,
                          package="pagoda-fake-brokenhook", verified_on="nothing")

    @hookimpl
    def pagoda_platform_probe():
        raise ValueError("probe exploded: device table corrupt")
"""

API_VERSION = """
    from pagoda.plugins import PlatformProbe, PluginInfo, hookimpl

    @hookimpl
    def pagoda_plugin_info():
        return PluginInfo("{name}", "9.0", {api})

    @hookimpl
    def pagoda_platform_probe():
        return [PlatformProbe("{name}dev", usable=True, score=1000)]
"""

NO_INFO = """
    from pagoda.plugins import PlatformProbe, hookimpl

    @hookimpl
    def pagoda_platform_probe():
        return [PlatformProbe("noinfodev", usable=True, score=1000)]
"""

FAILED = ("brokenimport", "brokenhook", "toonew", "tooold", "noinfo")


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("broken_plugins")
    write_plugin_distribution(root, "brokenimport", BROKEN_IMPORT)
    write_plugin_distribution(root, "brokenhook", BROKEN_HOOK, version="2.3")
    write_plugin_distribution(root, "noinfo", NO_INFO)
    write_plugin_distribution(root, "toonew", API_VERSION.format(name="toonew", api=TOO_NEW),
                              version="9.0")
    write_plugin_distribution(root, "tooold", API_VERSION.format(name="tooold", api=TOO_OLD),
                              version="9.0")
    return root


@pytest.fixture(scope="module")
def listing(plugin_dir: Path) -> dict[str, dict[str, Any]]:
    result = run_pagoda("plugins", "--json", pythonpath=plugin_dir)
    assert result.returncode == 0, result.stderr
    return by_name(result.json()["plugins"])


@pytest.fixture(scope="module")
def collect_env(plugin_dir: Path) -> CliResult:
    return run_pagoda("collect-env", "--json", pythonpath=plugin_dir)


def test_other_plugins_still_load(listing: dict[str, dict[str, Any]]) -> None:
    for name in ("core", "cpu", "template", "server"):
        assert listing[name]["status"] == "loaded"
    assert listing["cpu"]["devices"][0]["usable"] is True


def test_import_error_reported_with_traceback(listing: dict[str, dict[str, Any]]) -> None:
    rec = listing["brokenimport"]
    assert rec["status"] == "error"
    assert rec["distribution"] == "pagoda-fake-brokenimport"
    assert "'brokenimport'" in rec["error"] and "libfake.so not found" in rec["error"]
    assert "fake_pagoda_brokenimport.py" in rec["traceback"]
    assert "RuntimeError: vendor SDK missing: libfake.so not found" in rec["traceback"]


def test_raising_hook_reported_with_traceback(listing: dict[str, dict[str, Any]]) -> None:
    rec = listing["brokenhook"]
    assert rec["status"] == "error"
    assert "pagoda_platform_probe" in rec["error"] and "'brokenhook'" in rec["error"]
    assert "ValueError: probe exploded: device table corrupt" in rec["traceback"]
    assert rec["devices"] == []


def test_out_of_window_plugins_are_refused(listing: dict[str, dict[str, Any]]) -> None:
    for name, api in (("toonew", TOO_NEW), ("tooold", TOO_OLD)):
        rec = listing[name]
        assert (rec["status"], rec["api_version"]) == ("refused", api)
        assert f"'{name}'" in rec["error"] and f"plugin API {api}" in rec["error"]
        assert rec["devices"] == []  # a refused plugin registers nothing


def test_plugin_without_info_hook_is_an_error(listing: dict[str, dict[str, Any]]) -> None:
    rec = listing["noinfo"]
    assert rec["status"] == "error"
    assert rec["error"] == ("plugin 'noinfo' does not implement "
                            "pagoda_plugin_info() -> PluginInfo")
    assert rec["devices"] == []


def test_text_listing_shows_errors_and_tracebacks(plugin_dir: Path) -> None:
    result = run_pagoda("plugins", pythonpath=plugin_dir)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "brokenimport  (pagoda-fake-brokenimport 1.0, plugin API ?)  [error]" in out
    assert "RuntimeError: vendor SDK missing: libfake.so not found" in out
    assert (f"brokenhook  (pagoda-fake-brokenhook 2.3, plugin API {PLUGIN_API_VERSION})  "
            "[error]") in out
    assert "ValueError: probe exploded: device table corrupt" in out
    assert f"toonew  (pagoda-fake-toonew 9.0, plugin API {TOO_NEW})  [refused]" in out
    assert f"tooold  (pagoda-fake-tooold 9.0, plugin API {TOO_OLD})  [refused]" in out
    assert "WARNING" not in result.stderr  # `plugins` reports failures itself


def test_other_commands_warn_at_startup(collect_env: CliResult) -> None:
    assert collect_env.returncode == 0, collect_env.stderr
    warnings = [line for line in collect_env.stderr.splitlines() if line.startswith("WARNING")]
    for name in FAILED:
        assert any(f"Plugin {name} (pagoda-fake-{name})" in w for w in warnings), name
    assert "RuntimeError: vendor SDK missing" in collect_env.stderr
    assert "ValueError: probe exploded" in collect_env.stderr


def test_collect_env_lists_failed_plugins_not_their_devices(collect_env: CliResult) -> None:
    env = collect_env.json()
    assert sorted(env["failed_plugins"]) == sorted(FAILED)
    assert "libfake.so not found" in env["failed_plugins"]["brokenimport"]
    platforms = {d["platform"] for d in env["devices"]}
    assert {"cpu", "template"} <= platforms
    assert not {"toonewdev", "tooolddev", "noinfodev"} & platforms
