"""`host_memory`: /proc/meminfo's total and available memory, else sysconf's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pagoda.platforms import MemoryInfo
from pagoda.platforms.host_memory import host_memory

KIB = 1024


def _sysconf() -> MemoryInfo:
    page = os.sysconf("SC_PAGE_SIZE")
    return MemoryInfo(os.sysconf("SC_PHYS_PAGES") * page, os.sysconf("SC_AVPHYS_PAGES") * page)


def test_meminfo(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       65536000 kB\nMemFree:         1000000 kB\n"
                       "MemAvailable:   32000000 kB\nHugePages_Total:       0\n")
    assert host_memory(meminfo) == MemoryInfo(65536000 * KIB, 32000000 * KIB)


def test_kernels_without_mem_available_report_mem_free(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:  2048 kB\nMemFree:  1024 kB\n")
    assert host_memory(meminfo) == MemoryInfo(2048 * KIB, 1024 * KIB)


@pytest.mark.parametrize("text", [None, "MemFree: 1024 kB\n", "MemTotal: lots kB\n"],
                         ids=["missing", "no-total", "garbled"])
def test_sysconf_otherwise(tmp_path: Path, text: str | None) -> None:
    meminfo = tmp_path / "meminfo"
    if text is not None:
        meminfo.write_text(text)
    found, expected = host_memory(meminfo), _sysconf()
    assert found.total == expected.total
    assert 0 < found.available <= found.total


@pytest.mark.skipif(not Path("/proc/meminfo").exists(), reason="no /proc/meminfo here")
def test_this_host() -> None:
    found = host_memory()
    assert found.total == _sysconf().total  # MemTotal is the physical pages
    assert 0 < found.available < found.total
