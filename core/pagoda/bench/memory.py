"""Resident memory of a process, now and at its peak, for the benchmarks and /metrics.

Read from `/proc/<pid>/status` (VmRSS, VmHWM) on Linux; elsewhere only this process's
peak is known (`getrusage`), and other figures are None.
"""

from __future__ import annotations

import os
import resource
import sys
from pathlib import Path


def _status_kib(pid: int, key: str) -> int | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:  # not Linux, or the process is gone
        return None
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return None


def resident_bytes(pid: int | None = None) -> int | None:
    """The process's resident set size now (this process when `pid` is None)."""
    kib = _status_kib(pid or os.getpid(), "VmRSS")
    return None if kib is None else kib * 1024


def peak_resident_bytes(pid: int | None = None) -> int | None:
    """The largest resident set size the process has had (this process when None)."""
    kib = _status_kib(pid or os.getpid(), "VmHWM")
    if kib is not None:
        return kib * 1024
    if pid not in (None, os.getpid()):
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # macOS counts bytes, Linux KiB


def mib(size: int | None) -> str:
    """`size` in MiB for a report, or "n/a" when it is not known."""
    return "n/a" if size is None else f"{size / 2**20:.0f} MiB"
