"""Entry point of pagoda-cpu: tiny, imports nothing heavy; heavy parts load by name."""

from __future__ import annotations

from pagoda.plugins import (
    AttentionBackendSpec,
    KernelProvider,
    PlatformProbe,
    PluginInfo,
    QuantMethodSpec,
    hookimpl,
)
from pagoda_cpu import __version__

PLATFORM = "cpu"
CPU_OPS = ("rms_norm", "fused_add_rms_norm", "silu_and_mul")
"""The ops with a CPU-specific implementation; core's references serve the rest."""
TARGET_PLUGIN_API = 3  # the pagoda plugin API this package was built against
_OPS = "pagoda_cpu.ops"


@hookimpl
def pagoda_plugin_info() -> PluginInfo:
    return PluginInfo("cpu", __version__, TARGET_PLUGIN_API, "CPUs through PyTorch",
                      package="pagoda-cpu",
                      verified_on="x86-64 CPUs (AMD Zen 5, AVX-512): the whole test suite in CI")


@hookimpl
def pagoda_platform_probe() -> list[PlatformProbe]:
    from pagoda_cpu.host import core_count, cpu_model

    device = f"{cpu_model()} ({core_count()} cores)"
    return [PlatformProbe(PLATFORM, usable=True, score=10, devices=(device,))]


@hookimpl
def pagoda_platform_factory(name: str):
    if name != PLATFORM:
        return None
    from pagoda_cpu.platform import CpuPlatform

    return CpuPlatform()


@hookimpl
def pagoda_attention_backends() -> list[AttentionBackendSpec]:
    return [
        AttentionBackendSpec(
            "cpu_sdpa", "pagoda_cpu.attention:CpuSdpaAttentionBackend", (PLATFORM,), priority=10
        )
    ]


@hookimpl
def pagoda_quant_methods() -> list[QuantMethodSpec]:
    return [QuantMethodSpec("gguf", "pagoda_cpu.quant_gguf:GGUFInt4Method", (PLATFORM,))]


@hookimpl
def pagoda_kernel_providers() -> list[KernelProvider]:
    return [
        KernelProvider(op, "cpu_native", f"{_OPS}:{op}", (PLATFORM,), priority=10)
        for op in CPU_OPS
    ]
