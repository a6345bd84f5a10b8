"""The shared Triton kernels as NVIDIA GPUs launch them: with Triton's defaults, or, when
PAGODA_CUDA_DEPENDENT_LAUNCH names them (1: all) on compute capability 9.0 and up (Hopper
on; `pagoda_cuda.native.dependent_families` decides for every kernel), those families
launched while the kernel ahead still runs (programmatic dependent launch,
`TritonLaunch.dependent_launch`).
That is off by default: on the H200 one 8B request's 128 tokens took 607 against 581 ms in
bf16 and 484 against 423 ms with FP8 weights with it (`pagoda bench latency`, session 12 in
docs/benchmarks.md; not profiled: the likely cost is a kernel launched early holding
multiprocessor slots while it waits).

`KERNELS` holds the CUDA kernel providers' implementations: each has its op's reference
signature and passes `launch=` to `pagoda.kernels.triton`.
"""

from __future__ import annotations

import functools

import torch

from pagoda.kernels.triton.common import dependent_launch_supported
from pagoda.kernels.triton.launch import LaunchParams, TritonLaunch
from pagoda.kernels.triton.launched import LaunchedKernels
from pagoda.kernels.triton.row_input import GATED, NORMED, RowInput
from pagoda_cuda.native import dependent_families

FP8_DECODE_ATTENTION = LaunchParams(num_warps=2, num_stages=2, maxnreg=128)
"""Decode steps of many sequences over an fp8 cache: programs of 2 warps and at most 128
registers a thread, so that ~8 share a multiprocessor (Triton's default of 4 warps takes
~200 registers for the converted tiles: 2 programs). H100, 1000 sequences x 192 tokens at
the 8B shape: 277 -> 195 us a layer (`docs/benchmarks.md`, session 30); a 16-bit cache
gains nothing from it."""


@functools.cache
def device_launch(device: torch.device) -> TritonLaunch:
    """Launch parameters for `device` (decided once)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    return TritonLaunch(fp8_decode_attention=FP8_DECODE_ATTENTION,
                        dependent_launch=dependent_families(index)
                        if dependent_launch_supported() else frozenset())


def _launch(device: torch.device) -> TritonLaunch:
    return device_launch(device)  # looked up at each call: tests replace device_launch


KERNELS = LaunchedKernels(_launch)
"""The ops' implementations, named by op (the providers' targets)."""


def row_values(row: RowInput) -> torch.Tensor:
    """A fused decode layer's row input as its ops' kernels compute it (x + residual into
    `row.summed`), for a one-row matmul that does not compute it itself."""
    if row.kind == GATED:
        return KERNELS.silu_and_mul(row.x)
    if row.kind != NORMED:
        return row.x
    assert row.norm_weight is not None
    if row.residual is None:
        return KERNELS.rms_norm(row.x, row.norm_weight, row.eps)
    normed, summed = KERNELS.fused_add_rms_norm(row.x, row.residual, row.norm_weight, row.eps)
    assert row.summed is not None
    row.summed.copy_(summed)
    return normed
