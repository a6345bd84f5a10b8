"""Can torch-xla run here, and on what? Answered without importing torch or torch_xla.

The PJRT device decides: `PJRT_DEVICE=CPU` is XLA's CPU device (usable, for testing, with
a score below the real CPU platform); otherwise (unset or `TPU`) a TPU must be visible: a
Google TPU PCI device, `/dev/accel[0-9]*` nodes (TPU v2-v4), a `/dev/vfio` group holding a TPU, or a TPU VM's
`TPU_ACCELERATOR_TYPE`. The GCE metadata server is not asked: the probe stays offline.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

from pagoda.platforms.probing import missing_module, platform_probe, read_attribute
from pagoda.plugins import PlatformProbe

PLATFORM = "tpu"
TPU_SCORE = 90
XLA_CPU_SCORE = 2  # below pagoda-cpu (10): `--device auto` never picks XLA's CPU device over it
PINS = "torch==2.9.0 torch-xla==2.9.0"
INSTALL_HINT = f"pip install pagoda-tpu's pins ({PINS}), e.g. pip install pagoda-tpu"
XLA_CPU_DEVICE = "XLA's CPU device (PJRT_DEVICE=CPU): for testing, not a TPU"
VISIBLE_DEVICES_ENV = ("TPU_VISIBLE_CHIPS",)

GOOGLE_PCI_VENDOR = "0x1ae0"
TPU_PCI_DEVICES = frozenset({"0x0027", "0x005e", "0x0062", "0x0063", "0x006f", "0x0076"})
"""PCI device ids of TPU chips (v2/v3 through 7x); Google's other devices (gVNIC) differ."""


def torch_xla_problem() -> str | None:
    """Why torch_xla cannot be imported here (read from package metadata), or None."""
    missing = missing_module("torch_xla", INSTALL_HINT)
    if missing:
        return missing
    try:
        xla, torch = metadata.version("torch-xla"), metadata.version("torch")
    except metadata.PackageNotFoundError as exc:
        return f"{exc.name} is not installed: {INSTALL_HINT}"
    if _major_minor(xla) != _major_minor(torch):
        return f"torch-xla {xla} needs torch {_major_minor(xla)}.*, found torch {torch}: {INSTALL_HINT}"
    return None


def _major_minor(version: str) -> str:
    return ".".join(re.split(r"[.+]", version)[:2])


def _tpu_pci_devices(devices_dir: Path) -> list[str]:
    """"<PCI address> (<vendor>:<device>)" of each TPU chip under a sysfs devices folder."""
    found = []
    for vendor_file in sorted(devices_dir.glob("*/vendor")):
        vendor = read_attribute(vendor_file)
        device = read_attribute(vendor_file.parent / "device")
        if vendor == GOOGLE_PCI_VENDOR and device in TPU_PCI_DEVICES:
            found.append(f"{vendor_file.parent.name} ({vendor[2:]}:{device[2:]})")
    return found


def find_tpus(root: Path = Path("/"), env: Mapping[str, str] = os.environ) -> list[str]:
    """Descriptions of the TPU chips visible here (empty when there is no sign of one)."""
    chips = _tpu_pci_devices(root / "sys/bus/pci/devices")
    if chips:
        return [f"Google TPU chip {c}" for c in chips]
    accel = sorted(p.name for p in (root / "dev").glob("accel[0-9]*"))
    if accel:
        return [f"Google TPU chip /dev/{name}" for name in accel]
    groups = sorted(p.name for p in (root / "dev/vfio").glob("[0-9]*"))
    vfio = [g for g in groups if _tpu_pci_devices(root / "sys/kernel/iommu_groups" / g / "devices")]
    if vfio:
        return [f"Google TPU chip /dev/vfio/{g}" for g in vfio]
    if env.get("TPU_ACCELERATOR_TYPE"):
        return [f"Google TPU ({env['TPU_ACCELERATOR_TYPE']}, from TPU_ACCELERATOR_TYPE)"]
    return []


def xla_devices(root: Path = Path("/"),
                env: Mapping[str, str] = os.environ) -> tuple[list[str], str | None]:
    """The devices torch-xla would run on here, as PJRT_DEVICE chooses, or why there are none."""
    pjrt = env.get("PJRT_DEVICE", "").strip().upper()
    if pjrt == "CPU":
        return [XLA_CPU_DEVICE], None
    if pjrt not in ("", "TPU"):
        return [], (f"PJRT_DEVICE={pjrt}: pagoda-tpu runs on TPUs (PJRT_DEVICE=TPU or unset) "
                    "or, for testing, on XLA's CPU device (PJRT_DEVICE=CPU)")
    chips = find_tpus(root, env)
    if not chips:
        return [], ("no TPU found (no Google TPU PCI device, /dev/accel[0-9] or /dev/vfio TPU "
                    "group, no TPU_ACCELERATOR_TYPE); set PJRT_DEVICE=CPU to use XLA's CPU "
                    "device for testing")
    return chips, None


def probe(root: Path = Path("/"), env: Mapping[str, str] = os.environ) -> PlatformProbe:
    devices, device_problem = xla_devices(root, env)
    score = XLA_CPU_SCORE if devices == [XLA_CPU_DEVICE] else TPU_SCORE
    return platform_probe(PLATFORM, devices, (torch_xla_problem(), device_problem), score=score,
                          visible_devices_env=VISIBLE_DEVICES_ENV)
