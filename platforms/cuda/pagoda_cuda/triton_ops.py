"""The shared Triton kernels as NVIDIA GPUs launch them: on compute capability 9.0 and up
(Hopper on), the kernels of a decode step are launched while the one ahead of them still
runs (programmatic dependent launch, `TritonLaunch.dependent_launch`); elsewhere with
Triton's defaults.

These are the CUDA kernel providers' implementations: each has its op's reference
signature and passes `launch=` to `pagoda.kernels.triton`.
"""

from __future__ import annotations

import functools
import os

import torch

from pagoda.kernels import triton as shared
from pagoda.kernels.triton import quant_linear
from pagoda.kernels.triton.common import dependent_launch_supported
from pagoda.kernels.triton.launch import TritonLaunch
from pagoda.kernels.triton.launched import on_device

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


linear = on_device(shared.linear, _launch)
rms_norm = on_device(shared.rms_norm, _launch)
fused_add_rms_norm = on_device(shared.fused_add_rms_norm, _launch)
rotary_embedding = on_device(shared.rotary_embedding, _launch)
silu_and_mul = on_device(shared.silu_and_mul, _launch)
gelu_and_mul = on_device(shared.gelu_and_mul, _launch)
sample_from_logits = on_device(shared.sample_from_logits, _launch)
apply_token_bitmask = on_device(shared.apply_token_bitmask, _launch)
fused_moe = on_device(shared.fused_moe, _launch)
lora_shrink = on_device(shared.lora_shrink, _launch)
lora_expand = on_device(shared.lora_expand, _launch)
fp8_linear = on_device(quant_linear.fp8_linear, _launch)
int8_linear = on_device(quant_linear.int8_linear, _launch)
woq_linear = on_device(quant_linear.woq_linear, _launch)
