"""The shared Triton kernels, launched with the parameters of the tensors' AMD GPU.

`KERNELS` holds the ROCm kernel providers' implementations: each has its op's reference
signature and passes `launch=` (see `pagoda_rocm.launch`) to `pagoda.kernels.triton`.
"""

from __future__ import annotations

import functools

import torch

from pagoda.kernels.triton.launch import TritonLaunch
from pagoda.kernels.triton.launched import LaunchedKernels
from pagoda_rocm.launch import launch_for_arch


@functools.cache
def device_launch(device: torch.device) -> TritonLaunch:
    """Launch parameters for the architecture of `device` (read once per device)."""
    return launch_for_arch(torch.cuda.get_device_properties(device).gcnArchName)


def _launch(device: torch.device) -> TritonLaunch:
    return device_launch(device)  # looked up at each call: tests replace device_launch


KERNELS = LaunchedKernels(_launch)
"""The ops' implementations, named by op (the providers' targets)."""
