"""Entry point: must stay tiny and import no vendor SDK. Heavy parts are named lazily."""

from __future__ import annotations

from pagoda.plugins import AttentionBackendSpec, KernelProvider, PlatformPlugin, PlatformProbe
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


def probe() -> PlatformProbe:
    # A real plugin checks cheaply for its hardware here and reports why it is missing
    # (see `pagoda.platforms.probing`). The template always works, with a score below `cpu`
    # so `auto` prefers the real one.
    return PlatformProbe(PLATFORM, usable=True, score=1, devices=("host CPU (template)",))


plugin = PlatformPlugin(
    PLATFORM, __version__, api_version=TARGET_PLUGIN_API, package="pagoda-plugin-template",
    description="Template platform (host CPU)",
    verified_on="the host CPU (x86-64), which is what it targets",
    probe=probe, platform="pagoda_template.platform:TemplatePlatform",
    attention_backends=[AttentionBackendSpec(
        "template", "pagoda_template.attention:TemplateAttentionBackend", (PLATFORM,),
        priority=5)],
    kernel_providers=[KernelProvider(op, "template", f"{_OPS}:{op}", (PLATFORM,), priority=5,
                                     is_available=f"{_OPS}:is_available")
                      for op in OPS],
)
