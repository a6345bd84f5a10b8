"""The shared Triton kernels, launched with the parameters of the tensors' AMD GPU.

These are the ROCm kernel providers' implementations: each has its op's reference
signature and passes `launch=` (see `pagoda_rocm.launch`) to `pagoda.kernels.triton`.
"""

from __future__ import annotations

import functools

import torch

from pagoda.kernels import triton as shared
from pagoda.kernels.triton.launch import TritonLaunch
from pagoda.kernels.triton.launched import on_device
from pagoda_rocm.launch import launch_for_arch


@functools.cache
def device_launch(device: torch.device) -> TritonLaunch:
    """Launch parameters for the architecture of `device` (read once per device)."""
    return launch_for_arch(torch.cuda.get_device_properties(device).gcnArchName)


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
