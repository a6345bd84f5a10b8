"""The shared Triton kernels, launched with the parameters of the tensors' AMD GPU.

These are the ROCm kernel providers' implementations: each has its op's reference
signature and passes `launch=` (see `pagoda_rocm.launch`) to `pagoda.kernels.triton`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from pagoda.kernels import triton as shared
from pagoda.kernels.triton.launch import TritonLaunch
from pagoda_rocm.launch import launch_for_arch


@functools.cache
def device_launch(device: torch.device) -> TritonLaunch:
    """Launch parameters for the architecture of `device` (read once per device)."""
    return launch_for_arch(torch.cuda.get_device_properties(device).gcnArchName)


def _on_device(kernel: Callable[..., Any]) -> Callable[..., Any]:
    """`kernel` launched with the parameters of its first argument's device."""

    @functools.wraps(kernel)
    def launch_on_device(first: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        return kernel(first, *args, launch=device_launch(first.device), **kwargs)

    return launch_on_device


linear = _on_device(shared.linear)
rms_norm = _on_device(shared.rms_norm)
fused_add_rms_norm = _on_device(shared.fused_add_rms_norm)
rotary_embedding = _on_device(shared.rotary_embedding)
silu_and_mul = _on_device(shared.silu_and_mul)
gelu_and_mul = _on_device(shared.gelu_and_mul)
sample_from_logits = _on_device(shared.sample_from_logits)
apply_token_bitmask = _on_device(shared.apply_token_bitmask)
fused_moe = _on_device(shared.fused_moe)
lora_shrink = _on_device(shared.lora_shrink)
lora_expand = _on_device(shared.lora_expand)
