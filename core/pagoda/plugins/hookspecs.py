"""The hooks a Pagoda plugin may implement (entry-point group `pagoda.plugins`).

Bump PLUGIN_API_VERSION when the contract changes: a hook or spec changes incompatibly, or
plugins take on a new obligation that core checks. Adding a hook, an argument to a hook or
an optional spec field is not a bump: pluggy passes arguments by keyword and an
implementation may take any subset of them. Core accepts the current and the previous
version (see `pagoda.plugins.api_version` and docs/plugins.md). Hooks run once at setup;
their results become plain registries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from pagoda.platforms.platform import Platform
    from pagoda.plugins.specs import (
        AttentionBackendSpec,
        CliCommandSpec,
        ExecutorSpec,
        KernelProvider,
        ModelArchSpec,
        PlatformProbe,
        PluginInfo,
        QuantMethodSpec,
    )

PROJECT_NAME = "pagoda"
ENTRY_POINT_GROUP = "pagoda.plugins"

PLUGIN_API_VERSION = 3
"""The plugin API this core implements. 2: `PluginInfo.package` and `verified_on`.
3: attention only through `AttentionBackend` (the `paged_attention` and `reshape_and_cache`
ops are retired: providers of them are ignored)."""

OLDEST_PLUGIN_API_VERSION = PLUGIN_API_VERSION - 1
"""The oldest plugin API this core still accepts (deprecated): always the previous one."""

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec(firstresult=True)
def pagoda_plugin_info() -> PluginInfo:
    """Name, version and the plugin API version the plugin was built for. Required."""


@hookspec
def pagoda_platform_probe() -> list[PlatformProbe]:
    """Report the platforms this plugin provides and whether each is usable here.

    Must be cheap and import no vendor SDK (no CUDA initialisation, no device open).
    """


@hookspec(firstresult=True)
def pagoda_platform_factory(name: str) -> Platform | None:
    """Build the `Platform` called `name`, importing heavy code only now; None if not ours."""


@hookspec
def pagoda_attention_backends() -> list[AttentionBackendSpec]:
    """Attention backends this plugin provides."""


@hookspec
def pagoda_quant_methods() -> list[QuantMethodSpec]:
    """Quantization methods this plugin provides."""


@hookspec
def pagoda_executors() -> list[ExecutorSpec]:
    """Executors this plugin provides."""


@hookspec
def pagoda_kernel_providers() -> list[KernelProvider]:
    """Implementations of core ops (see `pagoda.ops`)."""


@hookspec
def pagoda_model_architectures() -> list[ModelArchSpec]:
    """Model classes, keyed by HF `architectures` name."""


@hookspec
def pagoda_cli_subcommands() -> list[CliCommandSpec]:
    """Subcommands added to the `pagoda` CLI."""
