"""Pick the platform for `--device NAME` / `PAGODA_DEVICE` (default `auto`)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from pagoda.plugins.first_party import package_for
from pagoda.plugins.manager import ALLOW_LIST_ENV, PluginRegistries, get_registries

if TYPE_CHECKING:
    from pagoda.platforms.platform import Platform

DEVICE_ENV = "PAGODA_DEVICE"


class DeviceError(RuntimeError):
    """The requested device cannot be used; the message says what to do."""


def choose_device(requested: str | None, regs: PluginRegistries) -> str:
    """The platform name to use for `requested` (a name, "auto" or None)."""
    name = (requested or os.environ.get(DEVICE_ENV) or "auto").strip().lower()
    if name != "auto":
        if name not in regs.probes:
            raise DeviceError(_not_installed_message(name, regs))
        probe = regs.probes.get(name).spec
        if not probe.usable:
            raise DeviceError(f"Device {name!r} is installed but not usable here: {probe.reason}")
        return name
    usable = [e for e in regs.probes if e.spec.usable]
    if not usable:
        reasons = "; ".join(f"{e.spec.name}: {e.spec.reason}" for e in regs.probes) or "none"
        raise DeviceError(
            "No usable device found (install a platform plugin, e.g. `pip install pagoda-cpu`). "
            f"Installed platforms: {reasons}" + _failed_plugins_hint(regs)
        )
    return max(usable, key=lambda e: e.spec.score).spec.name


def _failed_plugins_hint(regs: PluginRegistries) -> str:
    failed = regs.failed()
    if not failed:
        return ""
    names = ", ".join(f"{r.name} ({r.status}: {r.error})" for r in failed)
    return f". Plugins that failed to load: {names}"


def _not_installed_message(name: str, regs: PluginRegistries) -> str:
    installed = ", ".join(regs.probes.names()) or "none"
    disabled = [r.name for r in regs.plugins if r.status == "disabled"]
    if name in disabled or package_for(name) in {r.distribution for r in regs.plugins
                                                  if r.status == "disabled"}:
        return (f"Device {name!r} is installed but its plugin is disabled by "
                f"{ALLOW_LIST_ENV}={os.environ.get(ALLOW_LIST_ENV)} (disabled: "
                f"{', '.join(disabled)}); add it to {ALLOW_LIST_ENV} or unset it")
    return (
        f"Device {name!r} is not provided by any installed plugin (installed devices: "
        f"{installed}). Install its platform package: pip install {package_for(name)}"
        + _failed_plugins_hint(regs)
    )


def resolve_platform(requested: str | None = None) -> Platform:
    """The Platform for `requested` (a name, "auto" or None), built once per process by
    the owning plugin's factory: every part of the process shares the one object."""
    from pagoda.platforms.platform import Platform  # torch: only once a device is used

    regs = get_registries()
    name = choose_device(requested, regs)
    platform = regs.platforms.get(name)
    if platform is None:
        owner = regs.probes.get(name).plugin
        platform = regs.call_plugin(owner, "pagoda_platform_factory", name=name)
        if not isinstance(platform, Platform):
            raise DeviceError(
                f"Plugin {owner!r} reported device {name!r} but its pagoda_platform_factory "
                f"returned {platform!r} instead of a Platform"
            )
        regs.platforms[name] = platform
    return platform
