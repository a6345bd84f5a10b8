"""What an AMD GPU architecture (its gfx target) implies: its generation and wavefront width."""

from __future__ import annotations

import re


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
