"""`--device NAME` / PAGODA_DEVICE / `auto`: which platform is chosen, and what the error
says when none can be."""

from __future__ import annotations

import pytest

from pagoda.platforms import Platform, resolve_platform
from pagoda.platforms.selection import DeviceError, choose_device
from pagoda.plugins import PlatformProbe, get_registries, hookimpl
from pagoda.plugins.first_party import package_for

pytestmark = pytest.mark.usefixtures("fresh_registries")


@pytest.mark.parametrize(
    ("device", "package"),
    [("cpu", "pagoda-cpu"), ("cuda", "pagoda-cuda"), ("rocm", "pagoda-rocm"),
     ("xpu", "pagoda-xpu"), ("tpu", "pagoda-tpu"), ("gaudi", "pagoda-gaudi"),
     ("hpu", "pagoda-gaudi"), ("acme", "pagoda-acme")],
)
def test_package_for_device(device: str, package: str) -> None:
    assert package_for(device) == package


def test_missing_device_names_the_package() -> None:
    with pytest.raises(DeviceError) as err:
        resolve_platform("acme")
    msg = str(err.value)
    assert "Device 'acme' is not provided by any installed plugin" in msg
    assert "pip install pagoda-acme" in msg
    assert "cpu" in msg and "template" in msg  # the installed devices are listed


def test_env_variable_selects_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAGODA_DEVICE", "acme")
    with pytest.raises(DeviceError, match="pip install pagoda-acme"):
        resolve_platform()
    monkeypatch.setenv("PAGODA_DEVICE", "template")
    assert resolve_platform().name == "template"


def test_explicit_device_beats_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAGODA_DEVICE", "rocm")
    assert resolve_platform("template").name == "template"


@pytest.mark.parametrize("requested", [None, "auto", " AUTO "])
def test_auto_picks_highest_score(requested: str | None) -> None:
    regs = get_registries()
    assert regs.probes.get("cpu").spec.score > regs.probes.get("template").spec.score
    assert choose_device(requested, regs) == "cpu"


def test_auto_resolves_to_cpu_platform() -> None:
    platform = resolve_platform()
    assert isinstance(platform, Platform) and type(platform).__name__ == "CpuPlatform"


@pytest.mark.parametrize("allow", ["template", "pagoda-plugin-template", " template , server "])
def test_allow_list_disables_other_plugins(monkeypatch: pytest.MonkeyPatch, allow: str) -> None:
    monkeypatch.setenv("PAGODA_PLUGINS", allow)
    regs = get_registries()
    cpu = regs.record("cpu")
    assert cpu.status == "disabled" and "PAGODA_PLUGINS" in (cpu.error or "")
    assert regs.record("core").status == "loaded"  # core is never disabled
    assert regs.record("template").status == "loaded"
    assert "cpu" not in regs.probes and "cpu_sdpa" not in regs.attention_backends
    assert choose_device("auto", regs) == "template"
    assert regs.failed() == []  # disabled on purpose is not a failure


def test_disabled_device_points_at_allow_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAGODA_PLUGINS", "template")
    with pytest.raises(DeviceError, match="PAGODA_PLUGINS"):
        resolve_platform("cpu")


def test_no_usable_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAGODA_PLUGINS", "server")
    with pytest.raises(DeviceError, match=r"No usable device found .*pip install pagoda-cpu"):
        resolve_platform()


def test_installed_but_unusable_device_says_why() -> None:
    regs = get_registries()
    regs.probes.add(PlatformProbe("npu", usable=False, reason="driver 1.2 is too old"), "fake")
    with pytest.raises(DeviceError, match="'npu' is installed but not usable here: driver 1.2"):
        choose_device("npu", regs)
    assert choose_device("auto", regs) == "cpu"


class _BogusFactory:
    @hookimpl
    def pagoda_platform_factory(self, name: str) -> object:
        return "not a platform"


def test_factory_returning_non_platform_is_an_error() -> None:
    regs = get_registries()
    regs.manager.register(_BogusFactory(), name="bogus")
    regs.probes.add(PlatformProbe("bogus", usable=True), "bogus")
    with pytest.raises(DeviceError, match="'bogus'.*returned 'not a platform' instead of a"):
        resolve_platform("bogus")
