"""Which torch.distributed backend connects Intel GPUs, decided from what is installed."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

XCCL_TORCH = (2, 8)
"""torch ships the "xccl" backend (oneCCL inside torch) for XPU from 2.8."""

CCL_MODULE = "oneccl_bindings_for_pytorch"
"""Intel's separately installed bindings; importing them registers the "ccl" backend."""


@dataclass(frozen=True)
class DistributedChoice:
    backend: str
    reason: str
    available: bool


def choose_backend(torch_version: tuple[int, int], xccl_built: bool,
                   ccl_installed: bool) -> DistributedChoice:
    """xccl where torch has it, else ccl where oneCCL's bindings are installed; when neither,
    xccl (or ccl on older torch) is named, marked unavailable with what to install."""
    version = ".".join(map(str, torch_version))
    if torch_version >= XCCL_TORCH and xccl_built:
        return DistributedChoice("xccl", f"torch {version} has the xccl backend", True)
    if ccl_installed:
        return DistributedChoice("ccl", f"{CCL_MODULE} is installed", True)
    if torch_version >= XCCL_TORCH:
        return DistributedChoice("xccl", f"torch {version} is built without xccl and "
                                 f"{CCL_MODULE} is not installed", False)
    return DistributedChoice("ccl", f"torch {version} predates xccl (2.8); pip install "
                             f"{CCL_MODULE} for multi-GPU runs", False)


def installed_backend() -> DistributedChoice:
    """The choice for the torch of this process."""
    import torch
    import torch.distributed as dist

    major, minor = (int(p) for p in torch.__version__.split(".")[:2])
    xccl = bool(getattr(dist, "is_xccl_available", lambda: False)())
    return choose_backend((major, minor), xccl, importlib.util.find_spec(CCL_MODULE) is not None)
