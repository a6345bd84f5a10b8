"""Can ROCm run here? Answered without importing torch or initialising HIP."""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping
from pathlib import Path

from pagoda.plugins import PlatformProbe
from pagoda_rocm.kfd import (
    DEV_KFD,
    KFD_NODES,
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
    if torch_dir is None:
        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.submodule_search_locations:
            return "torch is not installed"
        torch_dir = Path(next(iter(spec.submodule_search_locations)))
    try:
        text = (torch_dir / "version.py").read_text()
    except OSError:
        return None  # cannot tell cheaply; the platform finds out when it starts
    if re.search(r"^hip\b[^=\n]*=\s*['\"]", text, re.M):
        return None
    version = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", text, re.M)
    return (f"torch {version.group(1) if version else '(unknown version)'} is not a ROCm build "
            "(torch.version.hip is None); install one from https://download.pytorch.org/whl/rocm*")


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
    problems = [p for p in (torch_build_problem(torch_dir), gpu_problem) if p]
    devices = tuple(g.describe() for g in gpus)
    if problems:
        return PlatformProbe(PLATFORM, usable=False, devices=devices, reason="; ".join(problems))
    return PlatformProbe(PLATFORM, usable=True, score=SCORE, devices=devices)
