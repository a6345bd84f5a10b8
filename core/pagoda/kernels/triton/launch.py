"""Per-platform launch parameters of the shared Triton kernels.

A platform whose hardware wants other launch settings than Triton's defaults (e.g. AMD
GPUs, whose 64-wide wavefronts make Triton's default of 4 "warps" twice the threads it is
on NVIDIA GPUs) passes a `TritonLaunch` to the launchers' `launch=` argument. The default
sets nothing: every launch is Triton's default (for the gemv kernel, its own choice by
shape).
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


DEFAULT_LAUNCH = TritonLaunch()
"""Triton's defaults for every kernel (what CUDA uses)."""
