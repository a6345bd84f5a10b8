"""Host facts read from /proc without importing torch (the probe must stay cheap)."""

from __future__ import annotations

import os
import platform


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def core_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes (Linux); empty elsewhere."""
    try:
        with open("/proc/meminfo") as f:
            rows = (line.split() for line in f)
            return {r[0].rstrip(":"): int(r[1]) * 1024 for r in rows if len(r) >= 2}
    except OSError:
        return {}


def cpu_flags() -> set[str]:
    """Instruction-set flags ("flags" on x86, "Features" on Arm) from /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def has_fast_bf16() -> bool:
    """Whether bfloat16 matmuls run natively (AVX512-BF16, AMX or Arm BF16)."""
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16", "bf16"})
