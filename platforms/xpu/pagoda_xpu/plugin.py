"""Entry point of pagoda-xpu: tiny, imports neither torch, Triton nor IPEX; heavy parts
load by name."""

from __future__ import annotations

from pagoda.kernels.triton_providers import TritonAvailability, triton_kernel_providers
from pagoda.plugins import AttentionBackendSpec, PlatformPlugin, hookimpl
from pagoda_xpu import __version__

PLATFORM = "xpu"
TARGET_PLUGIN_API = 3  # the pagoda plugin API this package was built against
VERIFIED_ON = ("nothing with an Intel GPU: probe, backend choices and IPEX metadata tested "
               "on an x86 CPU host; kernels and serving never run")
TRITON = TritonAvailability("xpu", install_triton="XPU builds of torch bring pytorch-triton-xpu",
                            no_device="no Intel GPU is visible to torch (XPU)",
                            platform_check="pagoda_xpu.intel_triton:intel_backend_problem")
IPEX_BACKEND = AttentionBackendSpec("ipex", "pagoda_xpu.ipex_attention:IpexAttentionBackend",
                                    (PLATFORM,), priority=20)


class XpuPlugin(PlatformPlugin):
    """The declared plugin, plus the "ipex" attention backend where IPEX is installed."""

    @hookimpl
    def pagoda_attention_backends(self) -> list[AttentionBackendSpec]:
        from pagoda_xpu.ipex import ipex_unavailable_reason

        backends = super().pagoda_attention_backends()
        return backends if ipex_unavailable_reason() else [*backends, IPEX_BACKEND]


plugin = XpuPlugin(
    PLATFORM, __version__, api_version=TARGET_PLUGIN_API, package="pagoda-xpu",
    description="Intel GPUs through PyTorch XPU + Triton (+ IPEX attention)",
    verified_on=VERIFIED_ON,
    probe="pagoda_xpu.probe:probe", platform="pagoda_xpu.platform:XpuPlatform",
    attention_backends=[AttentionBackendSpec(
        "triton", "pagoda.kernels.triton.backend:TritonAttentionBackend", (PLATFORM,),
        priority=10)],
    kernel_providers=triton_kernel_providers(PLATFORM, TRITON),
)
