"""Entry point of pagoda-cpu: tiny, imports nothing heavy; heavy parts load by name."""

from __future__ import annotations

from pagoda.plugins import AttentionBackendSpec, KernelProvider, PlatformPlugin
from pagoda_cpu import __version__

PLATFORM = "cpu"
CPU_OPS = ("rms_norm", "fused_add_rms_norm", "silu_and_mul")
"""The ops with a CPU-specific implementation; core's references serve the rest."""
TARGET_PLUGIN_API = 3  # the pagoda plugin API this package was built against
_OPS = "pagoda_cpu.ops"

plugin = PlatformPlugin(
    PLATFORM, __version__, api_version=TARGET_PLUGIN_API, package="pagoda-cpu",
    description="CPUs through PyTorch",
    verified_on="x86-64 CPUs (AMD Zen 5, AVX-512): the whole test suite in CI",
    probe="pagoda_cpu.host:probe", platform="pagoda_cpu.platform:CpuPlatform",
    attention_backends=[AttentionBackendSpec(
        "cpu_sdpa", "pagoda_cpu.attention:CpuSdpaAttentionBackend", (PLATFORM,), priority=10)],
    kernel_providers=[KernelProvider(op, "cpu_native", f"{_OPS}:{op}", (PLATFORM,), priority=10)
                      for op in CPU_OPS],
)
