"""Two distributions that register the same plugin name: neither may vanish silently."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_harness import write_plugin_distribution

from pagoda.plugins import get_registries

FORK = """
    from pagoda.plugins import PLUGIN_API_VERSION, PlatformProbe, PluginInfo, hookimpl

    @hookimpl
    def pagoda_plugin_info():
        return PluginInfo("cpu", "1.0", PLUGIN_API_VERSION, package="pagoda-cpu-fork",
                          verified_on="nothing")

    @hookimpl
    def pagoda_platform_probe():
        return [PlatformProbe("cpu", usable=True, score=99, devices=("forked cpu",))]
"""


@pytest.mark.usefixtures("fresh_registries")
def test_duplicate_plugin_name_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_plugin_distribution(tmp_path, "cpu", FORK, distribution="pagoda-cpu-fork")
    monkeypatch.syspath_prepend(str(tmp_path))  # real entry points, found first
    regs = get_registries()
    dists = {r.distribution for r in regs.plugins if r.name == "cpu"}
    assert dists == {"pagoda-cpu", "pagoda-cpu-fork"}
    assert any(r.status == "error" and "pagoda-cpu" in (r.error or "") for r in regs.plugins)
