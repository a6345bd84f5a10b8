"""Entry point of pagoda-cpu: tiny, imports nothing heavy; heavy parts load by name."""

from __future__ import annotations

from pagoda.plugins import AttentionBackendSpec, KernelProvider, PlatformPlugin
from pagoda_cpu import __version__

PLATFORM = "cpu"
CPU_DENSE_OPS = ("linear", "rms_norm", "fused_add_rms_norm", "silu_and_mul", "gelu_and_mul",
                 "fused_moe")
"""Core ops with a CPU-specific implementation; core's references serve the others."""
CPU_QUANT_OPS = ("fp8_linear", "int8_linear", "woq_linear")
"""The quantized linears, offered only through these providers (`pagoda_cpu.quant_ops`)."""
CPU_OPS = CPU_DENSE_OPS + CPU_QUANT_OPS
"""Every op the CPU provides itself as "cpu_native" (on PyTorch's ops)."""
CPU_CSRC_OPS = ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "rotary_embedding",
                "woq_linear")
"""Ops also provided as "cpu_csrc", on the native kernels (`pagoda_cpu.csrc`), ahead of
"cpu_native" where those kernels are built: the elementwise ones straight from the
extension (`pagoda_cpu._C`: one call, no Python in between), the linear through
`pagoda_cpu.csrc_ops` (which picks the kernel by rows)."""
TARGET_PLUGIN_API = 3  # the pagoda plugin API this package was built against
_OPS = "pagoda_cpu.ops"
_QUANT = "pagoda_cpu.quant_ops"
_CSRC_IMPL = {op: f"pagoda_cpu._C:{op}" for op in CPU_CSRC_OPS} | {
    "woq_linear": "pagoda_cpu.csrc_ops:woq_linear"}
_PREPARE = {"fp8_linear": "prepare_fp8", "int8_linear": "prepare_int8",
            "woq_linear": "prepare_woq"}

plugin = PlatformPlugin(
    PLATFORM, __version__, api_version=TARGET_PLUGIN_API, package="pagoda-cpu",
    description="CPUs through PyTorch",
    verified_on="x86-64 CPUs (AMD Zen 5, AVX-512): the whole test suite in CI",
    probe="pagoda_cpu.host:probe", platform="pagoda_cpu.platform:CpuPlatform",
    attention_backends=[AttentionBackendSpec(
        "cpu_sdpa", "pagoda_cpu.attention:CpuSdpaAttentionBackend", (PLATFORM,), priority=10)],
    kernel_providers=[
        *(KernelProvider(op, "cpu_native", f"{_OPS}:{op}", (PLATFORM,), priority=10)
          for op in CPU_DENSE_OPS),
        *(KernelProvider(op, "cpu_native", f"{_QUANT}:{op}", (PLATFORM,), priority=10,
                         prepare=f"{_QUANT}:{_PREPARE[op]}")
          for op in CPU_QUANT_OPS),
        *(KernelProvider(op, "cpu_csrc", _CSRC_IMPL[op], (PLATFORM,), priority=20,
                         is_available="pagoda_cpu.csrc:unavailable",
                         prepare=f"pagoda_cpu.csrc_ops:{_PREPARE[op]}" if op in _PREPARE
                         else None)
          for op in CPU_CSRC_OPS),
    ],
)
