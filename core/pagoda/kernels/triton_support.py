"""When the shared Triton kernels can serve a platform: the checks behind the providers of
`pagoda.kernels.triton_providers`. Imports torch, not Triton (it checks that Triton is
there)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import torch

from pagoda.platforms.probing import missing_module
from pagoda.plugins.lazy import load_target

if TYPE_CHECKING:
    from pagoda.kernels.triton_providers import TritonAvailability

KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MAX_HEAD_SIZE = 256


@functools.cache
def triton_unavailable_reason(availability: TritonAvailability) -> str | None:
    """None when the kernels can run in this process, else why not, in the order
    `TritonAvailability` says."""
    reason = missing_module("triton", availability.install_triton)
    if reason is None and availability.platform_check is not None:
        reason = load_target(availability.platform_check)()
    if reason is None and not torch.get_device_module(availability.device_type).is_available():
        reason = availability.no_device
    return reason


def supports(dtype: torch.dtype | None = None, kv_cache_dtype: torch.dtype | None = None,
             head_size: int | None = None, **_: Any) -> bool:
    """The kernels compute in float32 from 32- and 16-bit floats, heads up to 256 wide."""
    dtypes_ok = all(d is None or d in KERNEL_DTYPES for d in (dtype, kv_cache_dtype))
    return dtypes_ok and (head_size is None or head_size <= MAX_HEAD_SIZE)
