"""Entry point of pagoda-xpu: tiny, imports neither torch, Triton nor IPEX; heavy parts
load by name."""

from __future__ import annotations

from pagoda.kernels.triton_providers import triton_kernel_providers
from pagoda.plugins import (
    AttentionBackendSpec,
    KernelProvider,
    PlatformProbe,
    PluginInfo,
    hookimpl,
)
from pagoda_xpu import __version__

PLATFORM = "xpu"
TARGET_PLUGIN_API = 3  # the pagoda plugin API this package was built against
VERIFIED_ON = ("nothing with an Intel GPU: probe, backend choices and IPEX metadata tested "
               "on an x86 CPU host; kernels and serving never run")
_CHECKS = "pagoda_xpu.kernels"


@hookimpl
def pagoda_plugin_info() -> PluginInfo:
    return PluginInfo("xpu", __version__, TARGET_PLUGIN_API,
                      "Intel GPUs through PyTorch XPU + Triton (+ IPEX attention)",
                      package="pagoda-xpu", verified_on=VERIFIED_ON)


@hookimpl
def pagoda_platform_probe() -> list[PlatformProbe]:
    from pagoda_xpu.probe import probe

    return [probe()]


@hookimpl
def pagoda_platform_factory(name: str):
    if name != PLATFORM:
        return None
    from pagoda_xpu.platform import XpuPlatform

    return XpuPlatform()


@hookimpl
def pagoda_attention_backends() -> list[AttentionBackendSpec]:
    from pagoda_xpu.ipex import ipex_unavailable_reason

    backends = [AttentionBackendSpec(
        "triton", "pagoda.kernels.triton.backend:TritonAttentionBackend", (PLATFORM,), priority=10
    )]
    if ipex_unavailable_reason() is None:
        backends.append(AttentionBackendSpec(
            "ipex", "pagoda_xpu.ipex_attention:IpexAttentionBackend", (PLATFORM,), priority=20))
    return backends


@hookimpl
def pagoda_kernel_providers() -> list[KernelProvider]:
    return triton_kernel_providers(PLATFORM, _CHECKS)
