"""`pagoda plugins` lists the six first-party backends with how each stands here: usable,
installed but unusable (and why), or not installed (and what to install)."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from cli_harness import by_name, run_pagoda, write_plugin_distribution

from pagoda.plugins import get_registries
from pagoda.plugins.first_party import FIRST_PARTY_BACKENDS, KnownBackend, backend_status

SIX = {"cpu": "pagoda-cpu", "cuda": "pagoda-cuda", "rocm": "pagoda-rocm", "xpu": "pagoda-xpu",
       "tpu": "pagoda-tpu", "gaudi": "pagoda-gaudi"}


def _installed(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def test_table_is_the_six_backends() -> None:
    assert {b.name: b.distribution for b in FIRST_PARTY_BACKENDS} == SIX


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    result = run_pagoda("plugins", "--json")
    assert result.returncode == 0, result.stderr
    return result.json()


def test_json_lists_each_backend_as_it_stands_here(report: dict[str, Any]) -> None:
    backends = report["backends"]
    assert [(b["name"], b["distribution"]) for b in backends] == list(SIX.items())
    plugins = by_name(report["plugins"])
    for b in backends:
        version = _installed(b["distribution"])
        assert b["version"] == version, b
        if version is None:
            assert (b["status"], b["reason"], b["devices"]) == (
                "not installed", f"pip install {b['distribution']}", [])
            continue
        mine = [p for p in plugins.values() if p["distribution"] == b["distribution"]]
        probes = [d for p in mine for d in p["devices"]]
        if any(d["usable"] for d in probes):
            assert b["status"] == "usable" and b["devices"] and b["reason"] is None, b
        else:
            assert b["status"] == "unusable" and b["reason"], b
            assert all(d["reason"] in b["reason"] for d in probes)
        assert b["verified_on"] == next((p["verified_on"] for p in mine if p["verified_on"]),
                                        None)


def test_cpu_is_usable_here(report: dict[str, Any]) -> None:
    cpu = report["backends"][0]
    assert (cpu["name"], cpu["status"], cpu["version"]) == (
        "cpu", "usable", metadata.version("pagoda-cpu"))
    assert cpu["devices"] == by_name(report["plugins"])["cpu"]["devices"][0]["devices"]


def test_text_lists_the_six() -> None:
    result = run_pagoda("plugins")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("\n\nPlugins:\n")[0].splitlines()
    assert lines[0] == "First-party backends:"
    assert [line.split()[:2] for line in lines[1:]] == [[n, d] for n, d in SIX.items()]
    for line, dist in zip(lines[1:], SIX.values(), strict=True):
        version = _installed(dist)
        if version is None:
            assert line.endswith(f"not installed: pip install {dist}")
        else:
            assert f" {dist} {version} " in line
            assert "usable" in line and "(verified on: " in line
    assert " usable: " in lines[1]  # cpu


FINE = """
    from pagoda.plugins import PLUGIN_API_VERSION, PlatformProbe, PluginInfo, hookimpl

    @hookimpl
    def pagoda_plugin_info():
        return PluginInfo("fine", "1.2", PLUGIN_API_VERSION, package="pagoda-fake-fine",
                          verified_on="a test double, on no hardware")

    @hookimpl
    def pagoda_platform_probe():
        return [PlatformProbe("fine", usable=True, score=0, devices=("Fine F1", "Fine F2"))]
"""

NODEVICE = """
    from pagoda.plugins import OLDEST_PLUGIN_API_VERSION, PlatformProbe, PluginInfo, hookimpl

    @hookimpl
    def pagoda_plugin_info():
        return PluginInfo("nodevice", "1.0", OLDEST_PLUGIN_API_VERSION,
                          package="pagoda-fake-nodevice", verified_on="nothing yet")

    @hookimpl
    def pagoda_platform_probe():
        return [PlatformProbe("nodevice", usable=False, reason="no NoDevice card found")]
"""

BROKEN = """
    raise ImportError("libbroken.so: cannot open shared object file")
"""


@pytest.fixture
def fakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, KnownBackend]:
    """Installed fake backends (real entry points), one per situation, and their table rows."""
    write_plugin_distribution(tmp_path, "fine", FINE, version="1.2")
    write_plugin_distribution(tmp_path, "nodevice", NODEVICE)
    write_plugin_distribution(tmp_path, "broken", BROKEN)
    bare = tmp_path / "pagoda_fake_bare-1.0.dist-info"  # installed, but no entry point
    bare.mkdir()
    (bare / "METADATA").write_text("Metadata-Version: 2.1\nName: pagoda-fake-bare\nVersion: 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return {name: KnownBackend(name, f"pagoda-fake-{name}", "test doubles", (name,))
            for name in ("fine", "nodevice", "broken", "bare", "absent")}


@pytest.mark.usefixtures("fresh_registries")
def test_each_situation(fakes: dict[str, KnownBackend]) -> None:
    regs = get_registries()
    fine = backend_status(fakes["fine"], regs)
    assert (fine.status, fine.version, fine.devices) == ("usable", "1.2", ("Fine F1", "Fine F2"))
    assert (fine.reason, fine.verified_on) == (None, "a test double, on no hardware")

    nodevice = backend_status(fakes["nodevice"], regs)
    assert (nodevice.status, nodevice.version) == ("unusable", "1.0")
    assert (nodevice.reason, nodevice.verified_on) == ("no NoDevice card found", "nothing yet")

    broken = backend_status(fakes["broken"], regs)
    assert broken.status == "unusable"
    assert broken.reason.startswith("plugin 'broken' error: plugin 'broken' (pagoda-fake-broken) "
                                    "failed to load: ImportError('libbroken.so")

    bare = backend_status(fakes["bare"], regs)
    assert (bare.status, bare.reason) == (
        "unusable", "pagoda-fake-bare registers no pagoda.plugins entry point; reinstall it")

    absent = backend_status(fakes["absent"], regs)
    assert (absent.status, absent.version, absent.reason) == (
        "not installed", None, "pip install pagoda-fake-absent")


@pytest.mark.usefixtures("fresh_registries")
def test_disabled_backend_says_so(
    fakes: dict[str, KnownBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAGODA_PLUGINS", "nodevice")
    status = backend_status(fakes["fine"], get_registries())
    assert (status.status, status.reason) == (
        "unusable", "plugin 'fine' disabled: not in PAGODA_PLUGINS=nodevice")
