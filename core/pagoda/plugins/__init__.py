"""The plugin contract: hooks, specs and discovery. See `hookspecs` for the hooks."""

from pagoda.plugins.api_version import PluginAPIDeprecationWarning
from pagoda.plugins.hookspecs import (
    ENTRY_POINT_GROUP,
    OLDEST_PLUGIN_API_VERSION,
    PLUGIN_API_VERSION,
    hookimpl,
)
from pagoda.plugins.lazy import load_target
from pagoda.plugins.manager import (
    PluginRecord,
    PluginRegistries,
    get_registries,
    reset_registries,
    warn_about_failed_plugins,
)
from pagoda.plugins.platform_plugin import PlatformPlugin
from pagoda.plugins.specs import (
    ANY_PLATFORM,
    CORE_OPS,
    AttentionBackendSpec,
    CliCommandSpec,
    ExecutorSpec,
    KernelProvider,
    ModelArchSpec,
    PlatformProbe,
    PluginInfo,
    QuantMethodSpec,
)

__all__ = [
    "ANY_PLATFORM",
    "CORE_OPS",
    "ENTRY_POINT_GROUP",
    "OLDEST_PLUGIN_API_VERSION",
    "PLUGIN_API_VERSION",
    "AttentionBackendSpec",
    "CliCommandSpec",
    "ExecutorSpec",
    "KernelProvider",
    "ModelArchSpec",
    "PlatformPlugin",
    "PlatformProbe",
    "PluginAPIDeprecationWarning",
    "PluginInfo",
    "PluginRecord",
    "PluginRegistries",
    "QuantMethodSpec",
    "get_registries",
    "hookimpl",
    "load_target",
    "reset_registries",
    "warn_about_failed_plugins",
]
