"""Per-platform launch parameters of the shared Triton kernels.

A platform whose hardware wants other launch settings than Triton's defaults (e.g. AMD
GPUs, whose 64-wide wavefronts make Triton's default of 4 "warps" twice the threads it is
on NVIDIA GPUs, or NVIDIA GPUs that can launch a kernel before the one ahead of it ends)
passes a `TritonLaunch` to the launchers' `launch=` argument, for instance through
`pagoda.kernels.triton.launched`. The default sets nothing: every launch is Triton's
default (for the gemv kernel, its own choice by shape).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class LaunchParams:
    """Options of one kernel launch; None keeps Triton's default."""

    num_warps: int | None = None
    num_stages: int | None = None

    def kwargs(self) -> dict[str, Any]:
        """The keyword arguments to add to the kernel launch (none for the defaults)."""
        chosen = {"num_warps": self.num_warps, "num_stages": self.num_stages}
        return {k: v for k, v in chosen.items() if v is not None}


@dataclass(frozen=True)
class TritonLaunch:
    """Launch parameters by kernel family."""

    attention: LaunchParams = field(default_factory=LaunchParams)
    """`_attention_kernel`: paged attention over mixed batches."""

    reduce: LaunchParams = field(default_factory=LaunchParams)
    """`_reduce_splits_kernel`: combines split-KV partial results."""

    elementwise: LaunchParams = field(default_factory=LaunchParams)
    """Row and element kernels: norms, rotary, activation, KV cache writes."""

    gemv: LaunchParams = field(default_factory=LaunchParams)
    """`_gemv_kernel`: matmuls of a few rows. None keeps the kernel's own choice for the
    shape (see `pagoda.kernels.triton.gemv.plan_gemv`), not Triton's default."""

    dependent_launch: bool = False
    """Programmatic dependent launch (NVIDIA GPUs of compute capability 9.0 and up): the
    kernels of a decode step (matmuls of a few rows, norms, rotary, cache writes, attention,
    activations) are launched while the kernel ahead of them still runs, and wait for it
    (`common.wait_for_prior_kernels`) before they touch memory. Saves most of each launch's
    gap in a step of hundreds of short kernels."""

    def dependency(self) -> dict[str, Any]:
        """The launch arguments of a kernel taking `PDL` (see `dependent_launch`)."""
        return {"PDL": True, "launch_pdl": True} if self.dependent_launch else {"PDL": False}


DEFAULT_LAUNCH = TritonLaunch()
"""Triton's defaults for every kernel (what CUDA uses)."""
