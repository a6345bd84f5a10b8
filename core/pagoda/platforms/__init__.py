"""The Platform interface and device selection.

Choosing a device (`pagoda.platforms.selection.choose_device`) imports no torch; the
Platform interface does, so it is imported only when asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pagoda.platforms.platform import MemoryInfo, Platform
    from pagoda.platforms.selection import resolve_platform

__all__ = ["MemoryInfo", "Platform", "resolve_platform"]


def __getattr__(name: str) -> Any:
    if name in ("MemoryInfo", "Platform"):
        from pagoda.platforms import platform

        return getattr(platform, name)
    if name == "resolve_platform":
        from pagoda.platforms.selection import resolve_platform

        return resolve_platform
    raise AttributeError(f"module 'pagoda.platforms' has no attribute {name!r}")
