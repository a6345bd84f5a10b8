"""Entry point of pagoda-tpu: tiny, imports neither torch nor torch_xla; heavy parts load by name."""

from __future__ import annotations

import os

from pagoda.plugins import (
    AttentionBackendSpec,
    PlatformProbe,
    PluginInfo,
    hookimpl,
)
from pagoda_tpu import __version__

PLATFORM = "tpu"
TARGET_PLUGIN_API = 3  # the pagoda plugin API this package was built against
VERIFIED_ON = ("XLA's CPU device only (PJRT_DEVICE=CPU, torch-xla 2.9.0, x86-64): the xla "
               "backend, its ops and greedy parity with the CPU platform; never run on a TPU, "
               "the Pallas kernel included")


@hookimpl
def pagoda_plugin_info() -> PluginInfo:
    return PluginInfo("tpu", __version__, TARGET_PLUGIN_API,
                      "Google TPUs through torch-xla (XLA's CPU device for testing)",
                      package="pagoda-tpu", verified_on=VERIFIED_ON)


@hookimpl
def pagoda_platform_probe() -> list[PlatformProbe]:
    from pagoda_tpu.probe import probe

    return [probe()]


@hookimpl
def pagoda_platform_factory(name: str):
    if name != PLATFORM:
        return None
    # Usable without PJRT_DEVICE means the probe saw a TPU: say so before torch_xla starts.
    os.environ.setdefault("PJRT_DEVICE", "TPU")
    from pagoda_tpu.platform import TpuPlatform

    return TpuPlatform()


@hookimpl
def pagoda_attention_backends() -> list[AttentionBackendSpec]:
    return [
        AttentionBackendSpec("pallas", "pagoda_tpu.pallas:PallasAttentionBackend", (PLATFORM,),
                             priority=20),
        AttentionBackendSpec("xla", "pagoda_tpu.attention:XlaAttentionBackend", (PLATFORM,),
                             priority=10),
    ]
