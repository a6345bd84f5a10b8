"""Entry point of pagoda-rocm: tiny, imports neither torch nor Triton; heavy parts load by name."""

from __future__ import annotations

from pagoda.kernels.triton_providers import TritonAvailability, triton_kernel_providers
from pagoda.plugins import AttentionBackendSpec, PlatformPlugin
from pagoda_rocm import __version__

PLATFORM = "rocm"
TARGET_PLUGIN_API = 3  # the pagoda plugin API this package was built against
VERIFIED_ON = ("nothing with an AMD GPU: probe and launch choices tested on an x86 CPU host; "
               "kernels compiled for gfx942/gfx950/gfx1201 there, never run")
TRITON = TritonAvailability("cuda", install_triton="ROCm builds of torch bring "
                            "pytorch-triton-rocm", no_device="no AMD GPU is visible to torch (HIP)",
                            platform_check="pagoda_rocm.probe:torch_build_problem")

plugin = PlatformPlugin(
    PLATFORM, __version__, api_version=TARGET_PLUGIN_API, package="pagoda-rocm",
    description="AMD GPUs through a ROCm build of PyTorch + Triton", verified_on=VERIFIED_ON,
    probe="pagoda_rocm.probe:probe", platform="pagoda_rocm.platform:RocmPlatform",
    attention_backends=[AttentionBackendSpec(
        "triton", "pagoda_rocm.attention:RocmTritonAttentionBackend", (PLATFORM,), priority=10)],
    kernel_providers=triton_kernel_providers(PLATFORM, TRITON, module="pagoda_rocm.triton_ops:KERNELS"),
)
