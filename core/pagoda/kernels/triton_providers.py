"""Which core ops the shared Triton kernels implement, as kernel providers a platform
registers. Imports neither torch nor Triton: plugin entry points use it at discovery."""

from __future__ import annotations

from pagoda.plugins import KernelProvider

TRITON_OPS = ("linear", "rms_norm", "fused_add_rms_norm", "rotary_embedding", "silu_and_mul",
              "sample_from_logits")
"""Core ops with a kernel in `pagoda.kernels.triton`."""


def triton_kernel_providers(platform: str, checks: str, *, module: str = "pagoda.kernels.triton",
                            priority: int = 10) -> list[KernelProvider]:
    """One "triton" provider per op in TRITON_OPS for `platform`. `checks` names the
    platform's module with `unavailable_reason()` and `supports(**static_args)`; `module`
    the functions (a platform may wrap the shared ones with its launch parameters)."""
    return [
        KernelProvider(op, "triton", f"{module}:{op}", (platform,), priority=priority,
                       is_available=f"{checks}:unavailable_reason", supports=f"{checks}:supports")
        for op in TRITON_OPS
    ]
