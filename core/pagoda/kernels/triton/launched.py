"""The shared Triton kernels with a platform's launch parameters for each device.

A platform whose GPUs want other launch parameters than the defaults (`TritonLaunch`)
keeps a `LaunchedKernels` in a module of its own and names it in its kernel providers
(`triton_kernel_providers(module="pkg.mod:KERNELS")`, `triton_quant_providers(impls=...)`);
its attention backend overrides `TritonAttentionImpl.launch`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from pagoda.kernels.triton.launch import TritonLaunch
from pagoda.kernels.triton_providers import TRITON_OPS, TRITON_QUANT_OPS
from pagoda.quant.tensors import QuantizedActivation


def on_device(kernel: Callable[..., Any],
              launch_for: Callable[[torch.device], TritonLaunch]) -> Callable[..., Any]:
    """`kernel` (a launcher taking `launch=`) launched with `launch_for(device)`, the device
    being its first argument's (a tensor, or a `QuantizedActivation`)."""

    @functools.wraps(kernel)
    def launch_on_device(first: torch.Tensor | QuantizedActivation, *args: Any,
                         **kwargs: Any) -> Any:
        return kernel(first, *args, launch=launch_for(first.device), **kwargs)

    return launch_on_device


class LaunchedKernels:
    """Every shared kernel's launcher, launched with `launch_for(device)`: one attribute per
    op of TRITON_OPS and TRITON_QUANT_OPS, named as the op."""

    def __init__(self, launch_for: Callable[[torch.device], TritonLaunch]):
        from pagoda.kernels import triton as shared
        from pagoda.kernels.triton import quant_linear

        self.launch_for = launch_for
        """The launch parameters for a device (for launchers called directly, such as the
        fused decode layer's, `pagoda.kernels.triton.decode_layer`)."""
        for op in TRITON_OPS:
            setattr(self, op, on_device(getattr(shared, op), launch_for))
        for op in TRITON_QUANT_OPS:
            setattr(self, op, on_device(getattr(quant_linear, op), launch_for))
