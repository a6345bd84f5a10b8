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

KERNEL_FAMILIES = ("attention", "reduce", "elementwise", "gemv")
"""The Triton kernels by family, as `TritonLaunch` names them: paged attention, its split
sums, row and element kernels (norms, rotary, activations, KV cache writes), and the
matmuls of a few rows (dense, FP8 and INT8, weight-only)."""


@dataclass(frozen=True)
class LaunchParams:
    """Options of one kernel launch; None keeps Triton's default."""

    num_warps: int | None = None
    num_stages: int | None = None
    maxnreg: int | None = None
    """The most registers a thread may use (NVIDIA GPUs): fewer than the compiler would take
    lets more programs share a multiprocessor, at the cost of spills."""

    def kwargs(self) -> dict[str, Any]:
        """The keyword arguments to add to the kernel launch (none for the defaults)."""
        chosen = {"num_warps": self.num_warps, "num_stages": self.num_stages,
                  "maxnreg": self.maxnreg}
        return {k: v for k, v in chosen.items() if v is not None}


@dataclass(frozen=True)
class TritonLaunch:
    """Launch parameters by kernel family."""

    attention: LaunchParams = field(default_factory=LaunchParams)
    """`_attention_kernel`: paged attention over mixed batches."""

    fp8_decode_attention: LaunchParams | None = None
    """`_attention_kernel` over an fp8 cache in a step of one query token a sequence whose
    keys are not split (decode steps of many sequences); None: `attention`'s. Its tiles
    carry half the bytes of a 16-bit cache's, so it may want more, smaller programs."""

    reduce: LaunchParams = field(default_factory=LaunchParams)
    """`_reduce_splits_kernel`: combines split-KV partial results."""

    elementwise: LaunchParams = field(default_factory=LaunchParams)
    """Row and element kernels: norms, rotary, activation, KV cache writes."""

    gemv: LaunchParams = field(default_factory=LaunchParams)
    """`_gemv_kernel`: matmuls of a few rows. None keeps the kernel's own choice for the
    shape (see `pagoda.kernels.triton.gemv.plan_gemv`), not Triton's default."""

    dependent_launch: frozenset[str] = frozenset()
    """Programmatic dependent launch (NVIDIA GPUs of compute capability 9.0 and up): the
    kernel families (`KERNEL_FAMILIES`, or a platform's own kernels' names) launched while
    the kernel ahead of them still runs. Where any is named, every kernel lets the next one
    launch early and waits for the kernels ahead (`common.wait_for_prior_kernels`) before it
    touches memory (a kernel launched normally finds nothing to wait for); those of the
    named families are launched early themselves, saving most of their launch's gap."""

    def dependency(self, family: str) -> dict[str, Any]:
        """The launch arguments of a kernel of `family` taking `PDL` (see
        `dependent_launch`)."""
        if not self.dependent_launch:
            return {"PDL": False}
        return {"PDL": True, "launch_pdl": family in self.dependent_launch}


DEFAULT_LAUNCH = TritonLaunch()
"""Triton's defaults for every kernel (what CUDA uses)."""
