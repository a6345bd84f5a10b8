"""The host's Intel GPUs, read from the kernel's DRM files without torch or Level Zero:
render nodes (/dev/dri/renderD*) whose PCI device (/sys/class/drm/renderD*/device) has
Intel's vendor id, driven by i915 or xe."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pagoda.platforms.probing import read_attribute

SYS_DRM = Path("/sys/class/drm")
DEV_DRI = Path("/dev/dri")
INTEL_VENDOR_ID = "0x8086"


@dataclass(frozen=True)
class GpuInfo:
    render_node: str  # e.g. "renderD128"
    device_id: str  # PCI device id, e.g. "0x0bd5" (Data Center GPU Max 1550)
    driver: str  # "i915", "xe" or "" when unknown

    def describe(self) -> str:
        driver = f", {self.driver}" if self.driver else ""
        return f"Intel GPU [8086:{self.device_id.removeprefix('0x')}] ({self.render_node}{driver})"


def intel_gpus(sys_drm: Path = SYS_DRM) -> list[GpuInfo] | None:
    """Intel render nodes in minor-number order (Level Zero's order for one driver);
    None without the DRM class (no GPU driver at all)."""
    if not sys_drm.is_dir():
        return None
    nodes = sorted((p for p in sys_drm.glob("renderD*") if p.name[7:].isdigit()),
                   key=lambda p: int(p.name[7:]))
    gpus = []
    for node in nodes:
        device = node / "device"
        if read_attribute(device / "vendor").lower() != INTEL_VENDOR_ID:
            continue
        driver = device / "driver"
        gpus.append(GpuInfo(node.name, read_attribute(device / "device").lower(),
                            driver.resolve().name if driver.exists() else ""))
    return gpus


def node_access_problem(gpus: list[GpuInfo], dev_dri: Path = DEV_DRI) -> str | None:
    """Why this process cannot open the GPUs' render nodes, or None."""
    missing = [g.render_node for g in gpus if not (dev_dri / g.render_node).exists()]
    if missing:
        return (f"{dev_dri}/{missing[0]} is missing (in a container, pass --device=/dev/dri)")
    locked = [g.render_node for g in gpus
              if not os.access(dev_dri / g.render_node, os.R_OK | os.W_OK)]
    if locked:
        return (f"no read/write access to {dev_dri}/{locked[0]} (add the user to the 'render' "
                "group)")
    return None


def visible_gpus(gpus: list[GpuInfo], affinity_mask: str | None) -> list[GpuInfo]:
    """The GPUs ZE_AFFINITY_MASK selects, in their order: root-device indices, or
    "device.subdevice" entries (which keep their root device); entries naming no device
    are ignored. Unset or empty: all of them."""
    if not affinity_mask:
        return list(gpus)
    roots = (s.strip().split(".")[0] for s in affinity_mask.split(","))
    chosen = {int(r) for r in roots if r.isdigit()}
    return [g for i, g in enumerate(gpus) if i in chosen]
