"""The plugin API window, through real entry points: the previous API loads (deprecated), the
current one loads, and versions outside the window are refused with a message naming the
plugin, both versions and the fix. A plugin declaring API 2 or later must fill what 2
requires, and providers of ops retired by API 3 are ignored with a warning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cli_harness import by_name, run_pagoda, write_plugin_distribution

from pagoda.plugins import (
    OLDEST_PLUGIN_API_VERSION,
    PLUGIN_API_VERSION,
    PluginAPIDeprecationWarning,
    get_registries,
)

CURRENT, PREVIOUS = PLUGIN_API_VERSION, OLDEST_PLUGIN_API_VERSION
TOO_NEW, TOO_OLD = PLUGIN_API_VERSION + 1, OLDEST_PLUGIN_API_VERSION - 1

PLUGIN = """
    from pagoda.plugins import KernelProvider, PlatformProbe, PluginInfo, hookimpl

    @hookimpl
    def pagoda_plugin_info():
        return PluginInfo("{name}", "9.0", {api}{extra})

    @hookimpl
    def pagoda_platform_probe():
        return [PlatformProbe("{name}dev", usable=True, score=1000)]

    @hookimpl
    def pagoda_kernel_providers():
        # What an API 2 plugin could provide: an op since retired, and a live one.
        return [KernelProvider(op, "mine", "pagoda.ops.reference:rms_norm", ("{name}dev",))
                for op in ("paged_attention", "rms_norm")]
"""

VERIFIED = "nothing: a test double"
PLUGINS = {  # entry point -> (API version, extra PluginInfo arguments)
    "apiprevious": (PREVIOUS, f", package='pagoda-fake-apiprevious', verified_on='{VERIFIED}'"),
    "apicurrent": (CURRENT, f", package='pagoda-fake-apicurrent', verified_on='{VERIFIED}'"),
    "toonew": (TOO_NEW, ""),
    "tooold": (TOO_OLD, ""),
    "unverified": (CURRENT, ", package='pagoda-fake-unverified'"),
    "nopackage": (CURRENT, f", verified_on='{VERIFIED}'"),
    "copied": (CURRENT, f", package='pagoda-plugin-template', verified_on='{VERIFIED}'"),
}


def test_window_is_current_and_previous() -> None:
    assert (PLUGIN_API_VERSION, OLDEST_PLUGIN_API_VERSION) == (3, 2)
    assert (TOO_OLD, TOO_NEW) == (1, 4)


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("api_versions")
    for name, (api, extra) in PLUGINS.items():
        write_plugin_distribution(root, name, PLUGIN.format(name=name, api=api, extra=extra),
                                  version="9.0")
    return root


@pytest.fixture(scope="module")
def listing(plugin_dir: Path) -> dict[str, dict[str, Any]]:
    result = run_pagoda("plugins", "--json", pythonpath=plugin_dir)
    assert result.returncode == 0, result.stderr
    return by_name(result.json()["plugins"])


def test_previous_api_loads_deprecated(listing: dict[str, dict[str, Any]]) -> None:
    rec = listing["apiprevious"]
    assert (rec["status"], rec["api_version"], rec["error"]) == ("loaded", PREVIOUS, None)
    assert rec["devices"][0]["name"] == "apipreviousdev"
    assert rec["verified_on"] == VERIFIED
    assert rec["kernel_providers"] == {"rms_norm": ["mine"]}  # paged_attention: retired
    assert rec["deprecation"] == (
        f"plugin 'apiprevious' (pagoda-fake-apiprevious 9.0) targets plugin API {PREVIOUS}, "
        f"deprecated since API {CURRENT}: it loads now, the next plugin API bump refuses it; "
        f"upgrade it (pip install -U pagoda-fake-apiprevious) to one built for API {CURRENT} "
        "(see docs/plugins.md)")


def test_current_api_loads_with_its_statement(listing: dict[str, dict[str, Any]]) -> None:
    rec = listing["apicurrent"]
    assert (rec["status"], rec["api_version"], rec["error"]) == ("loaded", CURRENT, None)
    assert rec["devices"][0]["name"] == "apicurrentdev"
    assert (rec["verified_on"], rec["deprecation"]) == (VERIFIED, None)


def test_too_new_plugin_refused_asking_to_upgrade_pagoda(
    listing: dict[str, dict[str, Any]]
) -> None:
    rec = listing["toonew"]
    assert (rec["status"], rec["api_version"], rec["devices"]) == ("refused", TOO_NEW, [])
    assert rec["error"].startswith(
        f"plugin 'toonew' (pagoda-fake-toonew 9.0) targets pagoda plugin API {TOO_NEW}, but "
        f"pagoda ")
    assert rec["error"].endswith(
        f" accepts API {PREVIOUS}..{CURRENT}; upgrade pagoda (pip install -U pagoda) to one "
        f"that supports API {TOO_NEW}")


def test_too_old_plugin_refused_asking_to_upgrade_it(listing: dict[str, dict[str, Any]]) -> None:
    rec = listing["tooold"]
    assert (rec["status"], rec["api_version"], rec["devices"]) == ("refused", TOO_OLD, [])
    assert rec["error"].startswith(
        f"plugin 'tooold' (pagoda-fake-tooold 9.0) targets pagoda plugin API {TOO_OLD}, but ")
    assert rec["error"].endswith(
        f" accepts API {PREVIOUS}..{CURRENT}; upgrade the plugin "
        f"(pip install -U pagoda-fake-tooold) to one built for API {PREVIOUS}..{CURRENT}")


@pytest.mark.parametrize(
    ("name", "message"),
    [("unverified", "requires PluginInfo.verified_on; fill them"),
     ("nopackage", "requires PluginInfo.package; fill them"),
     ("copied", "says PluginInfo.package='pagoda-plugin-template', but it is installed by "
                "the distribution 'pagoda-fake-copied'; set package='pagoda-fake-copied'")],
)
def test_current_api_without_its_promises_is_an_error(
    listing: dict[str, dict[str, Any]], name: str, message: str
) -> None:
    rec = listing[name]
    assert (rec["status"], rec["devices"]) == ("error", [])
    assert f"plugin '{name}'" in rec["error"] and message in rec["error"]


def test_text_listing(plugin_dir: Path) -> None:
    result = run_pagoda("plugins", pythonpath=plugin_dir)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"apiprevious  (pagoda-fake-apiprevious 9.0, plugin API {PREVIOUS})  [loaded]\n" \
           f"  verified on: {VERIFIED}\n  deprecated: plugin 'apiprevious'" in out
    assert f"apicurrent  (pagoda-fake-apicurrent 9.0, plugin API {CURRENT})  [loaded]\n" \
           f"  verified on: {VERIFIED}\n  device apicurrentdev" in out
    assert f"toonew  (pagoda-fake-toonew 9.0, plugin API {TOO_NEW})  [refused]" in out
    assert f"tooold  (pagoda-fake-tooold 9.0, plugin API {TOO_OLD})  [refused]" in out


@pytest.mark.usefixtures("fresh_registries")
def test_discovery_warns_about_the_deprecated_api(
    plugin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(plugin_dir))
    with pytest.warns(PluginAPIDeprecationWarning) as warned:
        regs = get_registries()
    deprecated = {r.name for r in regs.plugins if r.deprecation}
    assert {"apiprevious", "template"} <= deprecated
    assert not {"apicurrent", "core"} & deprecated
    warned_about = {str(w.message).split("'")[1] for w in warned}
    assert warned_about == deprecated | {"apicurrent"}  # its paged_attention provider
    retired = [str(w.message) for w in warned if "op 'paged_attention'" in str(w.message)]
    assert len(retired) == 2 and all("is ignored" in m and "plugin API 3" in m
                                     for m in retired)
