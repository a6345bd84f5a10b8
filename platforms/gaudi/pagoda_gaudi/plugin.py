"""Entry point of pagoda-gaudi: tiny, imports neither torch nor the Gaudi SDK; heavy parts
load by name."""

from __future__ import annotations

from pagoda.plugins import AttentionBackendSpec, KernelProvider, PlatformPlugin
from pagoda_gaudi import __version__

PLATFORM = "gaudi"
TARGET_PLUGIN_API = 3  # the pagoda plugin API this package was built against
VERIFIED_ON = ("nothing with a Gaudi card: probe, bucketing and the paged attention glue "
               "(torch SDPA standing in) tested on an x86 CPU host")
_KERNELS = "pagoda_gaudi.kernels"
FUSED_OPS = ("rms_norm", "fused_add_rms_norm")

plugin = PlatformPlugin(
    PLATFORM, __version__, api_version=TARGET_PLUGIN_API, package="pagoda-gaudi",
    description="Intel Gaudi (HPU) through habana_frameworks.torch", verified_on=VERIFIED_ON,
    probe="pagoda_gaudi.probe:probe", platform="pagoda_gaudi.platform:GaudiPlatform",
    attention_backends=[AttentionBackendSpec(
        "fused_sdpa", "pagoda_gaudi.attention:FusedSdpaAttentionBackend", (PLATFORM,),
        priority=10)],
    kernel_providers=[
        KernelProvider(op, "fused", f"{_KERNELS}:{op}", (PLATFORM,), priority=10,
                       is_available="pagoda_gaudi.sdk:sdk_unavailable_reason",
                       supports=f"{_KERNELS}:supports")
        for op in FUSED_OPS
    ],
)
