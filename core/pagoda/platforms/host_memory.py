"""The host's memory, for platforms whose device memory is the host's (CPUs, XLA's CPU
device)."""

from __future__ import annotations

import os
from pathlib import Path

from pagoda.platforms.platform import MemoryInfo

MEMINFO = Path("/proc/meminfo")


def host_memory(meminfo: Path = MEMINFO) -> MemoryInfo:
    """Total and available host memory: from `meminfo` (Linux's /proc/meminfo; MemFree where
    the kernel reports no MemAvailable), else from sysconf."""
    try:
        rows = (line.split() for line in meminfo.read_text().splitlines())
        fields = {row[0].rstrip(":"): int(row[1]) * 1024 for row in rows if len(row) >= 2}
        return MemoryInfo(fields["MemTotal"], fields.get("MemAvailable", fields["MemFree"]))
    except (OSError, KeyError, ValueError):
        page = os.sysconf("SC_PAGE_SIZE")
        return MemoryInfo(os.sysconf("SC_PHYS_PAGES") * page,
                          os.sysconf("SC_AVPHYS_PAGES") * page)
