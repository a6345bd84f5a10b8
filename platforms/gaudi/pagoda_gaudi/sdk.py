"""The Gaudi SDK's pieces Pagoda uses, each imported only when first used."""

from __future__ import annotations

import functools
from typing import Any

from pagoda.platforms.probing import missing_module

SDK_MODULE = "habana_frameworks"


def sdk_missing() -> str | None:
    """Why the Gaudi PyTorch bridge is not installed, or None; imports nothing."""
    return missing_module(SDK_MODULE, "it comes with the Intel Gaudi software stack, not from "
                                      "PyPI", what="the Intel Gaudi PyTorch bridge")


@functools.cache
def sdk_unavailable_reason() -> str | None:
    """None when habana_frameworks.torch imports and sees an HPU, else why not."""
    missing = sdk_missing()
    if missing:
        return missing
    try:
        import habana_frameworks.torch as htorch
    except ImportError as exc:
        return f"habana_frameworks.torch cannot be imported: {exc}"
    if not htorch.hpu.is_available():
        return "no Gaudi card is visible to habana_frameworks.torch"
    return None


def hpu() -> Any:
    """`habana_frameworks.torch.hpu`, importing the bridge (which registers torch.hpu)."""
    import habana_frameworks.torch as htorch

    return htorch.hpu


def fused_sdpa() -> Any:
    """`FusedSDPA`: scaled dot-product attention as one TPC kernel."""
    from habana_frameworks.torch.hpex.kernels import FusedSDPA

    return FusedSDPA


def fused_rms_norm() -> Any:
    """`FusedRMSNorm`: RMSNorm as one TPC kernel."""
    from habana_frameworks.torch.hpex.normalization import FusedRMSNorm

    return FusedRMSNorm
