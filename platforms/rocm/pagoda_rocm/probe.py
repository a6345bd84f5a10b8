"""Can ROCm run here? Answered without importing torch or initialising HIP."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pagoda.platforms import probing
from pagoda.plugins import PlatformProbe
from pagoda_rocm.kfd import (
    DEV_KFD,
    KFD_NODES,
    VISIBLE_DEVICES_ENV,
    AmdSmiError,
    GpuInfo,
    amdsmi_gpus,
    device_access_problem,
    kfd_gpus,
    visible_gpus,
)

PLATFORM = "rocm"
SCORE = 100


def torch_build_problem(torch_dir: Path | None = None) -> str | None:
    """Why the installed torch cannot run on AMD GPUs (read from torch/version.py, where a
    HIP build sets `hip`), or None."""
    return probing.torch_build_problem(
        "hip", "is not a ROCm build (torch.version.hip is None); install one from "
               "https://download.pytorch.org/whl/rocm*", torch_dir)


def find_gpus(nodes: Path = KFD_NODES, dev_kfd: Path = DEV_KFD,
              environ: Mapping[str, str] | None = None) -> tuple[list[GpuInfo], str | None]:
    """The AMD GPUs HIP will show this process, or the reason there are none."""
    gpus, source = kfd_gpus(nodes), str(nodes)
    if gpus is None:
        try:
            gpus, source = amdsmi_gpus(), "amdsmi"
        except AmdSmiError as exc:
            return [], f"no AMD GPU visible: no amdgpu driver found (no {nodes}; {exc})"
    if not gpus:
        return [], f"no AMD GPU visible: the amdgpu driver lists none ({source})"
    access = device_access_problem(dev_kfd)
    if access:
        return [], f"AMD GPUs found but not usable: {access}"
    shown, chosen_by = visible_gpus(gpus, os.environ if environ is None else environ)
    if not shown:
        return [], f"{chosen_by} hides all {len(gpus)} AMD GPUs"
    return shown, None


def probe(nodes: Path = KFD_NODES, dev_kfd: Path = DEV_KFD,
          environ: Mapping[str, str] | None = None,
          torch_dir: Path | None = None) -> PlatformProbe:
    gpus, gpu_problem = find_gpus(nodes, dev_kfd, environ)
    return probing.platform_probe(
        PLATFORM, (g.describe() for g in gpus), (torch_build_problem(torch_dir), gpu_problem),
        score=SCORE, visible_devices_env=VISIBLE_DEVICES_ENV)
