"""What an AMD GPU architecture (its gfx target) implies: wavefront width and fp8 format."""

from __future__ import annotations

import re

import torch

FNUZ_FP8_ARCHS = ("gfx940", "gfx941", "gfx942")
"""MI300 (CDNA3): fp8 e4m3 "fnuz" (no negative zero, no infinities, bias 8)."""

OCP_FP8_ARCHS = ("gfx950",)
"""MI350 (CDNA4): OCP fp8 e4m3fn, as do all RDNA4 (gfx12xx) GPUs."""


def base_arch(name: str) -> str:
    """The gfx target of a device property `gcnArchName`: "gfx942:sramecc+:xnack-" -> "gfx942"."""
    return name.split(":")[0].strip().lower()


def gfx_major(arch: str) -> int:
    """9 for gfx90a/gfx942/gfx950 (CDNA), 11 for gfx1100, 12 for gfx1201; 0 if unknown."""
    found = re.fullmatch(r"gfx(\d+)[0-9a-f]{2}", base_arch(arch))
    return int(found.group(1)) if found else 0


def wavefront_size(arch: str) -> int:
    """Threads per wavefront: 64 on GCN/CDNA (gfx9 and older), 32 on RDNA (gfx10 onwards,
    as Triton compiles for them)."""
    return 32 if gfx_major(arch) >= 10 else 64


def fp8_dtype_for_arch(arch: str) -> torch.dtype | None:
    """The fp8 (e4m3) type the GPU's matrix cores take, or None when it has none."""
    arch = base_arch(arch)
    if arch in FNUZ_FP8_ARCHS:
        return torch.float8_e4m3fnuz
    if arch in OCP_FP8_ARCHS or gfx_major(arch) == 12:
        return torch.float8_e4m3fn
    return None
