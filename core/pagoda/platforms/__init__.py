"""The Platform interface and device selection."""

from pagoda.platforms.platform import MemoryInfo, Platform
from pagoda.platforms.selection import resolve_platform

__all__ = ["MemoryInfo", "Platform", "resolve_platform"]
