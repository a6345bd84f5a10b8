"""Host facts read from /proc without importing torch (the probe must stay cheap)."""

from __future__ import annotations

import functools
import os
import platform

from pagoda.plugins import PlatformProbe

SCORE = 10


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


@functools.cache
def cpu_flags() -> frozenset[str]:
    """Instruction-set flags ("flags" on x86, "Features" on Arm) from /proc/cpuinfo, read
    once per process (every quantized layer's preparation asks)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def has_fast_bf16() -> bool:
    """Whether bfloat16 matmuls run natively (AVX512-BF16, AMX or Arm BF16)."""
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16", "bf16"})


def device_name() -> str:
    """The CPU model and the cores this process may run on."""
    return f"{cpu_model()} ({core_count()} cores)"


def probe() -> PlatformProbe:
    """The CPU is always usable, with a score below any accelerator's."""
    return PlatformProbe("cpu", usable=True, score=SCORE, devices=(device_name(),))
