"""Entry point of pagoda-cuda: tiny, imports neither torch nor Triton; heavy parts load by name."""

from __future__ import annotations

from pagoda.kernels.triton_providers import (
    TritonAvailability,
    triton_kernel_providers,
    triton_quant_providers,
)
from pagoda.plugins import AttentionBackendSpec, KernelProvider, PlatformPlugin
from pagoda_cuda import __version__

PLATFORM = "cuda"
TARGET_PLUGIN_API = 3  # the pagoda plugin API this package was built against
TRITON = TritonAvailability("cuda", install_triton="pip install triton",
                            no_device="no CUDA device is visible to torch")


def native_unavailable() -> str | None:
    """Why the "cuda_native" providers cannot run here (they need the CUDA C++ library of
    `pagoda_cuda.native` and, for what it does not take, the Triton kernels), or None."""
    from pagoda_cuda.native import unavailable

    return TRITON() or unavailable()


def native_fp8_unavailable() -> str | None:
    """Why the FP8 "cuda_native" provider cannot run here (`pagoda_cuda.fp8_ops.unavailable`:
    off unless switched on), or None."""
    from pagoda_cuda.fp8_ops import unavailable

    return TRITON() or unavailable()


_QUANT = "pagoda.kernels.triton.quant_linear"
NATIVE_PROVIDERS = [
    KernelProvider("woq_linear", "cuda_native", "pagoda_cuda.woq_ops:woq_linear", (PLATFORM,),
                   priority=20, is_available="pagoda_cuda.plugin:native_unavailable",
                   supports=f"{_QUANT}:supports_woq", prepare="pagoda_cuda.woq_ops:prepare_woq"),
    KernelProvider("fp8_linear", "cuda_native", "pagoda_cuda.fp8_ops:fp8_linear", (PLATFORM,),
                   priority=20, is_available="pagoda_cuda.plugin:native_fp8_unavailable",
                   supports=f"{_QUANT}:supports_fp8", prepare="pagoda_cuda.fp8_ops:prepare_fp8",
                   quantized_input=f"{_QUANT}:quantized_input"),
]
"""The CUDA C++ kernels of csrc/ for a few rows (Triton's for the rest), ahead of the Triton
providers where they can run: woq_mma.cu for 4-bit weights; fp8_row.cu for one row of FP8
weights, off unless switched on: measured, it loses to Triton's FP8 row kernel where K is
long (as session 19's e4m3-MMA kernel did on every 8B shape: docs/benchmarks.md)."""

plugin = PlatformPlugin(
    PLATFORM, __version__, api_version=TARGET_PLUGIN_API, package="pagoda-cuda",
    description="NVIDIA GPUs through PyTorch + Triton",
    verified_on="one NVIDIA H200 (sm_90, CUDA 13, Triton 3.6): bash ci/gpu.sh",
    probe="pagoda_cuda.probe:probe", platform="pagoda_cuda.platform:CudaPlatform",
    attention_backends=[AttentionBackendSpec(
        "triton", "pagoda_cuda.attention:CudaTritonAttentionBackend", (PLATFORM,),
        priority=10)],
    kernel_providers=[
        *triton_kernel_providers(PLATFORM, TRITON, module="pagoda_cuda.triton_ops:KERNELS"),
        *triton_quant_providers(PLATFORM, TRITON, impls="pagoda_cuda.triton_ops:KERNELS"),
        *NATIVE_PROVIDERS,
        KernelProvider("all_reduce", "cuda_symm_mem", "pagoda_cuda.all_reduce:all_reduce",
                       (PLATFORM,), priority=20,
                       is_available="pagoda_cuda.all_reduce:unavailable")],
)
