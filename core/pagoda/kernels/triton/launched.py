"""The shared Triton kernels with a platform's launch parameters for each device.

A platform whose GPUs want other launch parameters than the defaults (`TritonLaunch`)
wraps the kernels' launchers with `on_device` in a module of its own, and names that
module's functions in its kernel providers (`triton_kernel_providers(module=...)`,
`triton_quant_providers(impls=...)`); its attention backend overrides
`TritonAttentionImpl.launch`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from pagoda.kernels.triton.launch import TritonLaunch


def on_device(kernel: Callable[..., Any],
              launch_for: Callable[[torch.device], TritonLaunch]) -> Callable[..., Any]:
    """`kernel` (a launcher taking `launch=`) launched with `launch_for(device)`, the device
    being its first argument's."""

    @functools.wraps(kernel)
    def launch_on_device(first: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        return kernel(first, *args, launch=launch_for(first.device), **kwargs)

    return launch_on_device
