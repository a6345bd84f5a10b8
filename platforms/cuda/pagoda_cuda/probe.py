"""Can CUDA run here? Answered without importing torch or initialising CUDA."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

from pagoda.plugins import PlatformProbe
from pagoda_cuda.nvml import GpuInfo, NvmlError, driver_gpus, nvml_gpus, visible_gpus

PLATFORM = "cuda"
SCORE = 100


def torch_build_problem() -> str | None:
    """Why the installed torch cannot run CUDA (read from torch/version.py), or None."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return "torch is not installed"
    try:
        text = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text()
    except OSError:
        return None  # cannot tell cheaply; the platform finds out when it starts
    if re.search(r"^cuda\b[^=\n]*=\s*['\"]", text, re.M):
        return None
    version = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", text, re.M)
    return (f"torch {version.group(1) if version else '(unknown version)'} is built without "
            "CUDA; install a CUDA build of torch")


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
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    shown = visible_gpus(gpus, env)
    if not shown:
        return [], f"CUDA_VISIBLE_DEVICES={env!r} hides all {len(gpus)} GPUs"
    return shown, None


def probe() -> PlatformProbe:
    gpus, gpu_problem = find_gpus()
    problems = [p for p in (torch_build_problem(), gpu_problem) if p]
    devices = tuple(g.describe() for g in gpus)
    if problems:
        return PlatformProbe(PLATFORM, usable=False, devices=devices, reason="; ".join(problems))
    return PlatformProbe(PLATFORM, usable=True, score=SCORE, devices=devices)
