"""Entry point of pagoda-server: registers its CLI subcommands into `pagoda`."""

from __future__ import annotations

from pagoda.plugins import PluginInfo, hookimpl
from pagoda_server import __version__

TARGET_PLUGIN_API = 1


@hookimpl
def pagoda_plugin_info() -> PluginInfo:
    return PluginInfo("server", __version__, TARGET_PLUGIN_API, "HTTP front end")
