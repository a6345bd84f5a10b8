"""Plugin discovery: load every `pagoda.plugins` entry point through pluggy, hold its
PluginInfo to the API policy (`api_version`), and turn its hook results into plain
registries.

A plugin that fails to import, targets an API version outside the window or raises in a
hook is recorded with its traceback (shown by `pagoda plugins`, warned about at start-up);
it never silently disappears and never takes the other plugins down with it. One on the
deprecated previous API loads, with a `PluginAPIDeprecationWarning`.
"""

from __future__ import annotations

import logging
import os
import traceback
import warnings
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import pluggy

from pagoda.plugins import hookspecs
from pagoda.plugins.api_version import (
    PluginAPIDeprecationWarning,
    api_incompatibility,
    broken_promises,
    deprecation_notice,
)
from pagoda.plugins.hookspecs import ENTRY_POINT_GROUP, PROJECT_NAME
from pagoda.plugins.registry import Registry
from pagoda.plugins.specs import (
    RETIRED_OPS,
    AttentionBackendSpec,
    CliCommandSpec,
    ExecutorSpec,
    KernelProvider,
    ModelArchSpec,
    PlatformProbe,
    PluginInfo,
    QuantMethodSpec,
)
from pagoda.version import __version__

logger = logging.getLogger(__name__)

CORE_PLUGIN = "core"
ALLOW_LIST_ENV = "PAGODA_PLUGINS"


@dataclass
class PluginRecord:
    """What discovery learned about one plugin."""

    name: str
    distribution: str
    version: str
    status: str  # "loaded", "error", "refused" or "disabled"
    api_version: int | None = None
    error: str | None = None
    traceback: str | None = None
    verified_on: str | None = None  # PluginInfo.verified_on (plugin API 2); None: unknown
    deprecation: str | None = None  # set when it targets a deprecated plugin API

    @property
    def ok(self) -> bool:
        return self.status == "loaded"


@dataclass
class PluginRegistries:
    """Everything the plugins registered, as plain data."""

    manager: pluggy.PluginManager
    plugins: list[PluginRecord] = field(default_factory=list)
    probes: Registry[PlatformProbe] = field(
        default_factory=lambda: Registry("platform", lambda s: s.name)
    )
    attention_backends: Registry[AttentionBackendSpec] = field(
        default_factory=lambda: Registry("attention backend", lambda s: s.name)
    )
    quant_methods: Registry[QuantMethodSpec] = field(
        default_factory=lambda: Registry("quantization method", lambda s: s.name)
    )
    executors: Registry[ExecutorSpec] = field(
        default_factory=lambda: Registry("executor", lambda s: s.name)
    )
    kernels: Registry[KernelProvider] = field(
        default_factory=lambda: Registry("kernel provider for op", lambda s: s.op)
    )
    models: Registry[ModelArchSpec] = field(
        default_factory=lambda: Registry("model architecture", lambda s: s.architecture)
    )
    cli_commands: Registry[CliCommandSpec] = field(
        default_factory=lambda: Registry("CLI subcommand", lambda s: s.name)
    )
    platforms: dict[str, Any] = field(default_factory=dict)
    """Platform objects built in this process, by name (see `resolve_platform`)."""

    def record(self, name: str) -> PluginRecord:
        for rec in self.plugins:
            if rec.name == name:
                return rec
        raise KeyError(name)

    def failed(self) -> list[PluginRecord]:
        return [r for r in self.plugins if r.status in ("error", "refused")]

    def plugin_object(self, name: str) -> Any:
        return self.manager.get_plugin(name)

    def call_plugin(self, plugin: str, hook: str, **kwargs: Any) -> Any:
        """Call one hook of one plugin only (so failures are attributable)."""
        return _call_for(self.manager, self.plugin_object(plugin), hook, **kwargs)


# Hook name -> (registry attribute) for the hooks that return lists of specs.
_COLLECTION_HOOKS = {
    "pagoda_platform_probe": "probes",
    "pagoda_attention_backends": "attention_backends",
    "pagoda_quant_methods": "quant_methods",
    "pagoda_executors": "executors",
    "pagoda_kernel_providers": "kernels",
    "pagoda_model_architectures": "models",
    "pagoda_cli_subcommands": "cli_commands",
}


def _call_for(pm: pluggy.PluginManager, plugin: object, hook: str, **kwargs: Any) -> Any:
    others = [p for p in pm.get_plugins() if p is not plugin]
    return pm.subset_hook_caller(hook, remove_plugins=others)(**kwargs)


def _allow_list() -> set[str] | None:
    raw = os.environ.get(ALLOW_LIST_ENV, "").strip()
    if not raw:
        return None
    return {name.strip() for name in raw.split(",") if name.strip()}


def _distribution_of(ep: metadata.EntryPoint) -> tuple[str, str]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return ("?", "?")
    return (dist.metadata["Name"] or "?", dist.version or "?")


def _describe(record: PluginRecord, info: PluginInfo) -> None:
    """Fill in what the plugin says about itself where the installer did not."""
    record.api_version = info.api_version
    record.verified_on = info.verified_on
    if record.version == "?":
        record.version = info.version
    if record.distribution == "?" and info.package:
        record.distribution = info.package


def _admit(record: PluginRecord, info: object) -> bool:
    """Hold a plugin's PluginInfo to the API policy; on False, `record` says why not."""
    if not isinstance(info, PluginInfo):
        record.status = "error"
        record.error = (f"plugin {record.name!r} does not implement "
                        "pagoda_plugin_info() -> PluginInfo")
        return False
    _describe(record, info)
    refused = api_incompatibility(info, record.distribution)
    if refused is not None:
        record.status, record.error = "refused", refused
        return False
    broken = broken_promises(info, record.distribution)
    if broken is not None:
        record.status, record.error = "error", broken
        return False
    record.deprecation = deprecation_notice(info, record.distribution)
    return True


def _register(regs: PluginRegistries, plugin: object, name: str, record: PluginRecord) -> None:
    """Register one plugin (a module, or an object such as a `PlatformPlugin`): check its
    info, then collect its hook results.

    A plugin is all or nothing: if any of its hooks raises, none of its registrations
    are kept and it is unregistered.
    """
    pm = regs.manager
    pm.register(plugin, name=name)
    hook = "pagoda_plugin_info"
    try:
        if not _admit(record, _call_for(pm, plugin, hook)):
            return
        collected: list[tuple[str, Any]] = []
        for hook, attr in _COLLECTION_HOOKS.items():
            for group in _call_for(pm, plugin, hook) or []:
                collected.extend((attr, spec) for spec in
                                 (group if isinstance(group, (list, tuple)) else [group]))
    except Exception as exc:  # a plugin's bug must not take the others down
        record.status = "error"
        record.error = f"hook {hook} of plugin {name!r} raised {exc!r}"
        record.traceback = traceback.format_exc()
        return
    finally:
        if record.status != "loaded":
            pm.unregister(plugin)
    for attr, spec in collected:
        if isinstance(spec, KernelProvider) and spec.op in RETIRED_OPS:
            warnings.warn(f"plugin {name!r} provides op {spec.op!r}, which core no longer "
                          f"declares ({RETIRED_OPS[spec.op]}); provider {spec.name!r} is "
                          "ignored", PluginAPIDeprecationWarning, stacklevel=3)
            continue
        getattr(regs, attr).add(spec, name)
    if record.deprecation:
        warnings.warn(record.deprecation, PluginAPIDeprecationWarning, stacklevel=3)


def discover_plugins() -> PluginRegistries:
    """Load the core's built-in plugin and every installed `pagoda.plugins` entry point."""
    from pagoda.plugins import builtin

    pm = pluggy.PluginManager(PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    regs = PluginRegistries(manager=pm)

    core = PluginRecord(CORE_PLUGIN, "pagoda", __version__, "loaded")
    regs.plugins.append(core)
    _register(regs, builtin, CORE_PLUGIN, core)

    allow = _allow_list()
    owners: dict[str, str] = {}
    for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        dist_name, dist_version = _distribution_of(ep)
        record = PluginRecord(ep.name, dist_name, dist_version, "loaded")
        regs.plugins.append(record)
        if ep.name in owners:
            record.status = "error"
            record.error = (f"plugin name {ep.name!r} is also registered by {owners[ep.name]}; "
                            f"uninstall one of them")
            continue
        owners[ep.name] = dist_name
        if allow is not None and ep.name not in allow and dist_name not in allow:
            record.status = "disabled"
            record.error = f"not in {ALLOW_LIST_ENV}={os.environ.get(ALLOW_LIST_ENV)}"
            continue
        try:
            plugin = ep.load()
        except Exception as exc:
            record.status = "error"
            record.error = f"plugin {ep.name!r} ({dist_name}) failed to load: {exc!r}"
            record.traceback = traceback.format_exc()
            continue
        _register(regs, plugin, ep.name, record)
    return regs


_registries: PluginRegistries | None = None


def get_registries() -> PluginRegistries:
    """The process-wide registries, discovered on first use."""
    global _registries
    if _registries is None:
        _registries = discover_plugins()
    return _registries


def reset_registries() -> None:
    """Forget discovered plugins (tests, or after installing a plugin at run time)."""
    global _registries
    _registries = None


def warn_about_failed_plugins(regs: PluginRegistries) -> None:
    """Log each plugin that failed to load, with its traceback: never a silent skip."""
    for rec in regs.failed():
        details = f"\n{rec.traceback}" if rec.traceback else ""
        logger.warning("Plugin %s (%s) %s: %s%s", rec.name, rec.distribution, rec.status,
                       rec.error, details)
