"""Entry point of pagoda-rocm: tiny, imports neither torch nor Triton; heavy parts load by name."""

from __future__ import annotations

from pagoda.kernels.triton_providers import triton_kernel_providers
from pagoda.plugins import (
    AttentionBackendSpec,
    KernelProvider,
    PlatformProbe,
    PluginInfo,
    hookimpl,
)
from pagoda_rocm import __version__

PLATFORM = "rocm"
TARGET_PLUGIN_API = 3  # the pagoda plugin API this package was built against
VERIFIED_ON = ("nothing with an AMD GPU: probe, fp8 and launch choices tested on an x86 CPU "
               "host; kernels compiled for gfx942/gfx950/gfx1201 there, never run")
_OPS = "pagoda_rocm.triton_ops"
_CHECKS = "pagoda_rocm.kernels"


@hookimpl
def pagoda_plugin_info() -> PluginInfo:
    return PluginInfo("rocm", __version__, TARGET_PLUGIN_API,
                      "AMD GPUs through a ROCm build of PyTorch + Triton",
                      package="pagoda-rocm", verified_on=VERIFIED_ON)


@hookimpl
def pagoda_platform_probe() -> list[PlatformProbe]:
    from pagoda_rocm.probe import probe

    return [probe()]


@hookimpl
def pagoda_platform_factory(name: str):
    if name != PLATFORM:
        return None
    from pagoda_rocm.platform import RocmPlatform

    return RocmPlatform()


@hookimpl
def pagoda_attention_backends() -> list[AttentionBackendSpec]:
    return [AttentionBackendSpec(
        "triton", "pagoda_rocm.attention:RocmTritonAttentionBackend", (PLATFORM,), priority=10
    )]


@hookimpl
def pagoda_kernel_providers() -> list[KernelProvider]:
    return triton_kernel_providers(PLATFORM, _CHECKS, module=_OPS)
