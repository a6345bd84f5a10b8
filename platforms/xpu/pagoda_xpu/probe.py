"""Can XPU run here? Answered without importing torch or creating a device context."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pagoda.platforms import probing
from pagoda.plugins import PlatformProbe
from pagoda_xpu.drm import DEV_DRI, SYS_DRM, GpuInfo, intel_gpus, node_access_problem, visible_gpus

PLATFORM = "xpu"
SCORE = 100
AFFINITY_ENV = "ZE_AFFINITY_MASK"


def torch_build_problem(torch_dir: Path | None = None) -> str | None:
    """Why the installed torch cannot run on Intel GPUs (read from torch/version.py, where
    an XPU build sets `xpu`), or None."""
    return probing.torch_build_problem(
        "xpu", "is not an XPU build (torch.version.xpu is None); install one from "
               "https://download.pytorch.org/whl/xpu", torch_dir)


def find_gpus(sys_drm: Path = SYS_DRM, dev_dri: Path = DEV_DRI,
              environ: Mapping[str, str] | None = None) -> tuple[list[GpuInfo], str | None]:
    """The Intel GPUs this process may use, or the reason there are none."""
    gpus = intel_gpus(sys_drm)
    if gpus is None:
        return [], f"no Intel GPU visible: no GPU driver found (no {sys_drm})"
    if not gpus:
        return [], f"no Intel GPU visible: no render node of vendor 0x8086 in {sys_drm}"
    access = node_access_problem(gpus, dev_dri)
    if access:
        return [], f"Intel GPUs found but not usable: {access}"
    return probing.visible_devices(gpus, AFFINITY_ENV, visible_gpus, "Intel GPUs", environ)


def probe(sys_drm: Path = SYS_DRM, dev_dri: Path = DEV_DRI,
          environ: Mapping[str, str] | None = None,
          torch_dir: Path | None = None) -> PlatformProbe:
    gpus, gpu_problem = find_gpus(sys_drm, dev_dri, environ)
    return probing.platform_probe(
        PLATFORM, (g.describe() for g in gpus), (torch_build_problem(torch_dir), gpu_problem),
        score=SCORE, visible_devices_env=(AFFINITY_ENV,))
