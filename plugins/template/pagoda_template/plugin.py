"""Entry point: must stay tiny and import no vendor SDK. Heavy parts are named lazily."""

from __future__ import annotations

from pagoda.plugins import (
    CORE_OPS,
    AttentionBackendSpec,
    KernelProvider,
    PlatformProbe,
    PluginInfo,
    hookimpl,
)
from pagoda_template import __version__

PLATFORM = "template"
TARGET_PLUGIN_API = 1  # the pagoda plugin API this package was built against
_OPS = "pagoda_template.ops"


@hookimpl
def pagoda_plugin_info() -> PluginInfo:
    return PluginInfo("template", __version__, TARGET_PLUGIN_API, "Template platform (host CPU)")


@hookimpl
def pagoda_platform_probe() -> list[PlatformProbe]:
    # A real plugin checks cheaply for its hardware here and reports why it is missing.
    # The template always works, with a score below `cpu` so `auto` prefers the real one.
    return [PlatformProbe(PLATFORM, usable=True, score=1, devices=("host CPU (template)",))]


@hookimpl
def pagoda_platform_factory(name: str):
    if name != PLATFORM:
        return None
    from pagoda_template.platform import TemplatePlatform

    return TemplatePlatform()


@hookimpl
def pagoda_attention_backends() -> list[AttentionBackendSpec]:
    return [AttentionBackendSpec(
        "template", "pagoda_template.attention:TemplateAttentionBackend", (PLATFORM,), priority=5
    )]


@hookimpl
def pagoda_kernel_providers() -> list[KernelProvider]:
    return [
        KernelProvider(op, "template", f"{_OPS}:{op}", (PLATFORM,), priority=5,
                       is_available=f"{_OPS}:is_available")
        for op in CORE_OPS
    ]
