"""The plugin API compatibility policy, as checks on a plugin's `PluginInfo`.

Core accepts a window of two plugin API versions: the current one and the previous one.
A plugin on the previous version loads with a deprecation notice (the next bump refuses
it); one outside the window is refused with a message naming the plugin, both versions and
the fix. A plugin that declares a version must keep that version's promises.
"""

from __future__ import annotations

import re

from pagoda.plugins.hookspecs import OLDEST_PLUGIN_API_VERSION, PLUGIN_API_VERSION
from pagoda.plugins.specs import PluginInfo
from pagoda.version import __version__


class PluginAPIDeprecationWarning(DeprecationWarning):
    """A plugin targets the oldest plugin API core still accepts."""


def accepted_versions() -> str:
    if OLDEST_PLUGIN_API_VERSION == PLUGIN_API_VERSION:
        return str(PLUGIN_API_VERSION)
    return f"{OLDEST_PLUGIN_API_VERSION}..{PLUGIN_API_VERSION}"


def normalize_distribution(name: str) -> str:
    """A distribution name as pip compares it (PEP 503): "Pagoda_CPU" -> "pagoda-cpu"."""
    return re.sub(r"[-_.]+", "-", name).lower()


def api_incompatibility(info: PluginInfo, distribution: str) -> str | None:
    """Why a plugin's API version is outside the accepted window, or None when inside."""
    if OLDEST_PLUGIN_API_VERSION <= info.api_version <= PLUGIN_API_VERSION:
        return None
    accepted = accepted_versions()
    if info.api_version > PLUGIN_API_VERSION:
        fix = f"upgrade pagoda (pip install -U pagoda) to one that supports API {info.api_version}"
    else:
        fix = f"upgrade the plugin (pip install -U {distribution}) to one built for API {accepted}"
    return (
        f"plugin {info.name!r} ({distribution} {info.version}) targets pagoda plugin API "
        f"{info.api_version}, but pagoda {__version__} accepts API {accepted}; {fix}"
    )


def broken_promises(info: PluginInfo, distribution: str) -> str | None:
    """What a plugin declaring API 2 or later leaves out of its PluginInfo, or None."""
    if info.api_version < 2:
        return None
    missing = [f for f in ("package", "verified_on") if not (getattr(info, f) or "").strip()]
    if missing:
        fields = " and ".join(f"PluginInfo.{f}" for f in missing)
        return (f"plugin {info.name!r} ({distribution}) declares plugin API "
                f"{info.api_version}, which requires {fields}; fill them (see docs/plugins.md)")
    package = info.package or ""
    if distribution != "?" and normalize_distribution(package) != normalize_distribution(
            distribution):
        return (f"plugin {info.name!r} says PluginInfo.package={package!r}, but it is "
                f"installed by the distribution {distribution!r}; set package={distribution!r}")
    return None


def deprecation_notice(info: PluginInfo, distribution: str) -> str | None:
    """The notice for a plugin on an accepted but superseded API version, or None."""
    if info.api_version >= PLUGIN_API_VERSION:
        return None
    return (
        f"plugin {info.name!r} ({distribution} {info.version}) targets plugin API "
        f"{info.api_version}, deprecated since API {PLUGIN_API_VERSION}: it loads now, the "
        f"next plugin API bump refuses it; upgrade it (pip install -U {distribution}) to one "
        f"built for API {PLUGIN_API_VERSION} (see docs/plugins.md)"
    )
