"""XPU's own condition for the shared Triton kernels (see `TRITON` in `pagoda_xpu.plugin`)."""

from __future__ import annotations

import importlib.util


def intel_backend_problem() -> str | None:
    """Why the installed Triton cannot compile for Intel GPUs, or None (imports Triton)."""
    if importlib.util.find_spec("triton.backends.intel") is None:
        return ("the installed triton has no Intel XPU backend (install pytorch-triton-xpu, "
                "which comes with XPU builds of torch, instead of PyPI's triton)")
    return None
