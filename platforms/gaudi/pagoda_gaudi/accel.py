"""The host's Gaudi cards, read from the habanalabs driver's files without the SDK: the
compute-accelerator class (/sys/class/accel/accelN, /dev/accel/accelN) of newer kernels,
else the driver's own class and nodes (/sys/class/habanalabs/hlN, /dev/hlN)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pagoda.platforms.probing import read_attribute

SYS_CLASS = Path("/sys/class")
DEV = Path("/dev")
HABANA_VENDOR_ID = "0x1da3"
DRIVER = "habanalabs"


@dataclass(frozen=True)
class Card:
    node: str  # e.g. "accel0" or "hl0"
    device_type: str  # what the driver reports, e.g. "GAUDI2"; "" when unknown
    module_id: int | None = None  # the OAM module id HABANA_VISIBLE_MODULES names

    def describe(self) -> str:
        name = self.device_type or "Gaudi"
        module = f", module {self.module_id}" if self.module_id is not None else ""
        return f"{name} ({self.node}{module})"


def _attribute(node: Path, name: str) -> str:
    """A habanalabs attribute, found on the class node or on its PCI device."""
    return read_attribute(node / name) or read_attribute(node / "device" / name)


def _is_gaudi(node: Path) -> bool:
    device = node / "device"
    driver = device / "driver"
    return (read_attribute(device / "vendor").lower() == HABANA_VENDOR_ID
            or (driver.exists() and driver.resolve().name == DRIVER))


def gaudi_cards(sys_class: Path = SYS_CLASS) -> tuple[list[Card], str] | None:
    """The Gaudi cards and the device-node directory they are opened through; None when
    no habanalabs driver is loaded. Accel nodes of other drivers (e.g. NPUs) are skipped."""
    for cls, prefix, dev_dir in (("accel", "accel", "accel"), ("habanalabs", "hl", "")):
        root = sys_class / cls
        nodes = sorted((p for p in root.glob(f"{prefix}[0-9]*") if p.name[len(prefix):].isdigit()),
                       key=lambda p: int(p.name[len(prefix):]))
        cards = [Card(n.name, _attribute(n, "device_type"),
                      int(m) if (m := _attribute(n, "module_id")).isdigit() else None)
                 for n in nodes if cls == "habanalabs" or _is_gaudi(n)]
        if cards:
            return cards, dev_dir
    return None


def node_access_problem(cards: list[Card], dev: Path) -> str | None:
    """Why this process cannot open the cards' device nodes, or None."""
    for card in cards:
        path = dev / card.node
        if not path.exists():
            return f"{path} is missing (in a container, pass the Gaudi devices through)"
        if not os.access(path, os.R_OK | os.W_OK):
            return f"no read/write access to {path}"
    return None


def visible_cards(cards: list[Card], visible_modules: str | None) -> list[Card]:
    """The cards HABANA_VISIBLE_MODULES (module ids, comma-separated) leaves; unset or
    empty, or cards whose module id is unknown: all of them."""
    if not visible_modules:
        return list(cards)
    wanted = {int(m) for m in visible_modules.split(",") if m.strip().isdigit()}
    return [c for c in cards if c.module_id is None or c.module_id in wanted]
