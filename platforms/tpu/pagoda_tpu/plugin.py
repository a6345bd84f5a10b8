"""Entry point of pagoda-tpu: tiny, imports neither torch nor torch_xla; heavy parts load by name."""

from __future__ import annotations

from pagoda.plugins import AttentionBackendSpec, PlatformPlugin
from pagoda_tpu import __version__

PLATFORM = "tpu"
TARGET_PLUGIN_API = 3  # the pagoda plugin API this package was built against
VERIFIED_ON = ("XLA's CPU device only (PJRT_DEVICE=CPU, torch-xla 2.9.0, x86-64): the xla "
               "backend, its ops and greedy parity with the CPU platform; never run on a TPU, "
               "the Pallas kernel included")

plugin = PlatformPlugin(
    PLATFORM, __version__, api_version=TARGET_PLUGIN_API, package="pagoda-tpu",
    description="Google TPUs through torch-xla (XLA's CPU device for testing)",
    verified_on=VERIFIED_ON,
    probe="pagoda_tpu.probe:probe", platform="pagoda_tpu.platform:TpuPlatform",
    # Usable without PJRT_DEVICE means the probe saw a TPU: say so before torch_xla starts.
    env_defaults={"PJRT_DEVICE": "TPU"},
    attention_backends=[
        AttentionBackendSpec("pallas", "pagoda_tpu.pallas:PallasAttentionBackend", (PLATFORM,),
                             priority=20),
        AttentionBackendSpec("xla", "pagoda_tpu.attention:XlaAttentionBackend", (PLATFORM,),
                             priority=10),
    ],
)
