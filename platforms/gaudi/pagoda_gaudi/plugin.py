"""Entry point of pagoda-gaudi: tiny, imports neither torch nor the Gaudi SDK; heavy parts
load by name."""

from __future__ import annotations

from pagoda.plugins import (
    AttentionBackendSpec,
    KernelProvider,
    PlatformProbe,
    PluginInfo,
    hookimpl,
)
from pagoda_gaudi import __version__

PLATFORM = "gaudi"
TARGET_PLUGIN_API = 3  # the pagoda plugin API this package was built against
VERIFIED_ON = ("nothing with a Gaudi card: probe, bucketing, fp8 choice and the paged "
               "attention glue (torch SDPA standing in) tested on an x86 CPU host")
_KERNELS = "pagoda_gaudi.kernels"
FUSED_OPS = ("rms_norm", "fused_add_rms_norm")


@hookimpl
def pagoda_plugin_info() -> PluginInfo:
    return PluginInfo("gaudi", __version__, TARGET_PLUGIN_API,
                      "Intel Gaudi (HPU) through habana_frameworks.torch",
                      package="pagoda-gaudi", verified_on=VERIFIED_ON)


@hookimpl
def pagoda_platform_probe() -> list[PlatformProbe]:
    from pagoda_gaudi.probe import probe

    return [probe()]


@hookimpl
def pagoda_platform_factory(name: str):
    if name != PLATFORM:
        return None
    from pagoda_gaudi.platform import GaudiPlatform

    return GaudiPlatform()


@hookimpl
def pagoda_attention_backends() -> list[AttentionBackendSpec]:
    return [AttentionBackendSpec(
        "fused_sdpa", "pagoda_gaudi.attention:FusedSdpaAttentionBackend", (PLATFORM,),
        priority=10)]


@hookimpl
def pagoda_kernel_providers() -> list[KernelProvider]:
    return [
        KernelProvider(op, "fused", f"{_KERNELS}:{op}", (PLATFORM,), priority=10,
                       is_available="pagoda_gaudi.sdk:sdk_unavailable_reason",
                       supports=f"{_KERNELS}:supports")
        for op in FUSED_OPS
    ]
