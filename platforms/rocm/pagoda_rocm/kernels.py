"""When the shared Triton kernels serve the ROCm platform (checked once, at op resolution)."""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

import torch

KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MAX_HEAD_SIZE = 256


@functools.cache
def unavailable_reason() -> str | None:
    """None when Triton is installed and torch sees an AMD GPU through HIP, else why not."""
    if importlib.util.find_spec("triton") is None:
        return "triton is not installed (ROCm builds of torch bring pytorch-triton-rocm)"
    if torch.version.hip is None:
        return f"torch {torch.__version__} is not a ROCm build"
    if not torch.cuda.is_available():
        return "no AMD GPU is visible to torch (HIP)"
    return None


def supports(dtype: torch.dtype | None = None, kv_cache_dtype: torch.dtype | None = None,
             head_size: int | None = None, **_: Any) -> bool:
    """The kernels compute in float32 from 32- and 16-bit floats, heads up to 256 wide."""
    dtypes_ok = all(d is None or d in KERNEL_DTYPES for d in (dtype, kv_cache_dtype))
    return dtypes_ok and (head_size is None or head_size <= MAX_HEAD_SIZE)
