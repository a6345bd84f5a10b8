"""Entry point: must stay tiny and import no vendor SDK. Heavy parts are named lazily."""

from __future__ import annotations

from pagoda.plugins import (
    AttentionBackendSpec,
    KernelProvider,
    PlatformProbe,
    PluginInfo,
    hookimpl,
)
from pagoda_template import __version__

PLATFORM = "template"
# The pagoda plugin API this package was built against. The template deliberately stays on
# the oldest API core accepts (2), so the test suite proves that a plugin built for the
# previous API keeps working. A plugin of your own targets the current API: see "Make it
# yours" in README.md.
TARGET_PLUGIN_API = 2
_OPS = "pagoda_template.ops"
# The core ops this package implements, by name (not `CORE_OPS`): an op that core adds later
# is then served by its reference here, instead of naming a kernel this package lacks.
OPS = ("rms_norm", "fused_add_rms_norm", "rotary_embedding", "silu_and_mul", "gelu_and_mul")


@hookimpl
def pagoda_plugin_info() -> PluginInfo:
    return PluginInfo("template", __version__, TARGET_PLUGIN_API, "Template platform (host CPU)",
                      package="pagoda-plugin-template",
                      verified_on="the host CPU (x86-64), which is what it targets")


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
        for op in OPS
    ]
