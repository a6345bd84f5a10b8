"""Can CUDA run here? Answered without importing torch or initialising CUDA."""

from __future__ import annotations

from pagoda.platforms.probing import platform_probe, torch_build_problem, visible_devices
from pagoda.plugins import PlatformProbe
from pagoda_cuda.nvml import GpuInfo, NvmlError, driver_gpus, nvml_gpus, visible_gpus

PLATFORM = "cuda"
SCORE = 100
VISIBLE_DEVICES_ENV = "CUDA_VISIBLE_DEVICES"


def find_gpus() -> tuple[list[GpuInfo], str | None]:
    """The GPUs CUDA will show this process, or the reason there are none."""
    try:
        gpus = nvml_gpus()
        source = "NVML"
    except NvmlError as exc:
        listed = driver_gpus()
        if listed is None:
            return [], f"no NVIDIA driver found ({exc}; no /proc/driver/nvidia or /dev/nvidia*)"
        gpus, source = listed
    if not gpus:
        return [], f"the NVIDIA driver reports no GPU ({source})"
    return visible_devices(gpus, VISIBLE_DEVICES_ENV, visible_gpus, "GPUs")


def probe() -> PlatformProbe:
    gpus, gpu_problem = find_gpus()
    torch_problem = torch_build_problem(
        "cuda", "is built without CUDA; install a CUDA build of torch")
    return platform_probe(PLATFORM, (g.describe() for g in gpus), (torch_problem, gpu_problem),
                          score=SCORE, visible_devices_env=(VISIBLE_DEVICES_ENV,))
