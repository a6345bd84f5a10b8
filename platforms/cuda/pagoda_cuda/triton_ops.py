"""The shared Triton kernels as NVIDIA GPUs launch them: on compute capability 9.0 and up
(Hopper on), the kernels of a decode step are launched while the one ahead of them still
runs (programmatic dependent launch, `TritonLaunch.dependent_launch`); elsewhere with
Triton's defaults.

`KERNELS` holds the CUDA kernel providers' implementations: each has its op's reference
signature and passes `launch=` to `pagoda.kernels.triton`.
"""

from __future__ import annotations

import functools
import os

import torch

from pagoda.kernels.triton.common import dependent_launch_supported
from pagoda.kernels.triton.launch import TritonLaunch
from pagoda.kernels.triton.launched import LaunchedKernels

DEPENDENT_LAUNCH_CAPABILITY = (9, 0)
"""The first compute capability with programmatic dependent launch."""
DEPENDENT_LAUNCH_ENV = "PAGODA_CUDA_DEPENDENT_LAUNCH"
"""Set to 0 to launch every kernel only after the one ahead of it (benchmarks compare)."""


@functools.cache
def device_launch(device: torch.device) -> TritonLaunch:
    """Launch parameters for `device` (its capability read once)."""
    capable = torch.cuda.get_device_capability(device) >= DEPENDENT_LAUNCH_CAPABILITY
    wanted = os.environ.get(DEPENDENT_LAUNCH_ENV, "1") != "0"
    return TritonLaunch(dependent_launch=capable and wanted and dependent_launch_supported())


def _launch(device: torch.device) -> TritonLaunch:
    return device_launch(device)  # looked up at each call: tests replace device_launch


KERNELS = LaunchedKernels(_launch)
"""The ops' implementations, named by op (the providers' targets)."""
