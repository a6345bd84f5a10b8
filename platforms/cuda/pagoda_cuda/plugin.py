"""Entry point of pagoda-cuda: tiny, imports neither torch nor Triton; heavy parts load by name."""

from __future__ import annotations

from pagoda.kernels.triton_providers import triton_kernel_providers
from pagoda.plugins import (
    AttentionBackendSpec,
    KernelProvider,
    PlatformProbe,
    PluginInfo,
    hookimpl,
)
from pagoda_cuda import __version__

PLATFORM = "cuda"
TARGET_PLUGIN_API = 3  # the pagoda plugin API this package was built against
_CHECKS = "pagoda_cuda.kernels"


@hookimpl
def pagoda_plugin_info() -> PluginInfo:
    return PluginInfo("cuda", __version__, TARGET_PLUGIN_API,
                      "NVIDIA GPUs through PyTorch + Triton", package="pagoda-cuda",
                      verified_on="one NVIDIA H200 (sm_90, CUDA 13, Triton 3.6): bash ci/gpu.sh")


@hookimpl
def pagoda_platform_probe() -> list[PlatformProbe]:
    from pagoda_cuda.probe import probe

    return [probe()]


@hookimpl
def pagoda_platform_factory(name: str):
    if name != PLATFORM:
        return None
    from pagoda_cuda.platform import CudaPlatform

    return CudaPlatform()


@hookimpl
def pagoda_attention_backends() -> list[AttentionBackendSpec]:
    return [AttentionBackendSpec(
        "triton", "pagoda.kernels.triton.backend:TritonAttentionBackend", (PLATFORM,), priority=10
    )]


@hookimpl
def pagoda_kernel_providers() -> list[KernelProvider]:
    return triton_kernel_providers(PLATFORM, _CHECKS)
