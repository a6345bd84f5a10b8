"""The host's AMD GPUs, read without HIP: the amdgpu driver's KFD topology in sysfs, else
amdsmi when it is installed. Neither imports torch nor opens a device.

KFD lists one node per CPU socket and per GPU, in the order ROCr (and so HIP) numbers the
GPUs; GPU nodes have SIMDs and a `gfx_target_version` (major * 10000 + minor * 100 +
stepping, e.g. 90402 for gfx942 and 90010 for gfx90a).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

KFD_NODES = Path("/sys/class/kfd/kfd/topology/nodes")
DEV_KFD = Path("/dev/kfd")
VISIBLE_DEVICES_ENV_LEVELS = (("ROCR_VISIBLE_DEVICES",),
                              ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"))
"""The variables that choose the GPUs HIP shows, in the order they apply: ROCr's, then
HIP's (CUDA's where HIP's is unset) indexing what ROCr left."""
VISIBLE_DEVICES_ENV = tuple(name for level in VISIBLE_DEVICES_ENV_LEVELS for name in level)


@dataclass(frozen=True)
class GpuInfo:
    name: str
    arch: str  # e.g. "gfx942"
    memory_bytes: int = 0  # 0: unknown
    uuid: str = ""  # ROCr's "GPU-<16 hex digits>", "" when unknown

    def describe(self) -> str:
        memory = f", {self.memory_bytes / 2**30:.0f} GiB" if self.memory_bytes else ""
        return f"{self.name} ({self.arch}{memory})"


class AmdSmiError(RuntimeError):
    """amdsmi is missing or failed; the message says which."""


def gfx_name(target_version: int) -> str:
    """The gfx target of a KFD `gfx_target_version`: 90402 -> "gfx942", 110501 -> "gfx1151"."""
    major, minor, stepping = target_version // 10000, target_version // 100 % 100, target_version % 100
    return f"gfx{major}{minor:x}{stepping:x}"


def _properties(path: Path) -> dict[str, int]:
    """A KFD `properties` file: one "name value" pair of integers per line."""
    pairs = (line.split() for line in path.read_text().splitlines())
    return {p[0]: int(p[1]) for p in pairs if len(p) == 2 and p[1].isdigit()}


def kfd_gpus(nodes: Path = KFD_NODES) -> list[GpuInfo] | None:
    """The GPUs of the KFD topology in ROCr order; None without the topology (no driver)."""
    if not nodes.is_dir():
        return None
    gpus = []
    for node in sorted((p for p in nodes.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
        try:
            props = _properties(node / "properties")
        except OSError:
            continue
        if not props.get("simd_count") or not props.get("gfx_target_version"):
            continue  # a CPU node
        unique_id = props.get("unique_id", 0)
        gpus.append(GpuInfo("AMD GPU", gfx_name(props["gfx_target_version"]),
                            props.get("local_mem_size", 0),
                            f"GPU-{unique_id:016x}" if unique_id else ""))
    return gpus


def amdsmi_gpus() -> list[GpuInfo]:
    """Every AMD GPU amdsmi reports (marketing names and VRAM sizes)."""
    try:
        import amdsmi
    except (ImportError, OSError) as exc:
        raise AmdSmiError(f"amdsmi is not usable ({exc})") from exc
    try:
        amdsmi.amdsmi_init()
        try:
            gpus = []
            for handle in amdsmi.amdsmi_get_processor_handles():
                asic = amdsmi.amdsmi_get_gpu_asic_info(handle)
                vram = amdsmi.amdsmi_get_gpu_vram_usage(handle)
                arch = str(asic["target_graphics_version"]).split(":")[0].lower()
                gpus.append(GpuInfo(str(asic["market_name"]), arch,
                                    int(vram["vram_total"]) * 2**20))
            return gpus
        finally:
            amdsmi.amdsmi_shut_down()
    except amdsmi.AmdSmiException as exc:
        raise AmdSmiError(f"amdsmi failed: {exc}") from exc


def _select(gpus: list[GpuInfo], mask: str) -> list[GpuInfo]:
    """The GPUs a visible-devices list names (indices or GPU- UUIDs), in its order, read up
    to the first entry that names none."""
    chosen: list[GpuInfo] = []
    for item in (s.strip() for s in mask.split(",")):
        by_uuid = [g for g in gpus if g.uuid and g.uuid.lower().startswith(item.lower())]
        if item.isdigit() and int(item) < len(gpus):
            chosen.append(gpus[int(item)])
        elif item.startswith("GPU-") and len(by_uuid) == 1:
            chosen.append(by_uuid[0])
        else:
            break
    return chosen


def visible_gpus(gpus: list[GpuInfo],
                 environ: Mapping[str, str]) -> tuple[list[GpuInfo], str]:
    """The GPUs HIP will show, and the variables that chose them: ROCR_VISIBLE_DEVICES
    first, then HIP_VISIBLE_DEVICES (or, when that is unset, CUDA_VISIBLE_DEVICES) indexing
    what ROCr left."""
    shown, used = list(gpus), []
    for names in VISIBLE_DEVICES_ENV_LEVELS:
        name = next((n for n in names if n in environ), None)
        if name is not None:
            shown = _select(shown, environ[name])
            used.append(f"{name}={environ[name]!r}")
    return shown, " and ".join(used)


def device_access_problem(dev_kfd: Path = DEV_KFD) -> str | None:
    """Why this process cannot open the KFD device node, or None."""
    if not dev_kfd.exists():
        return (f"{dev_kfd} is missing (in a container, pass --device=/dev/kfd "
                "--device=/dev/dri)")
    if not os.access(dev_kfd, os.R_OK | os.W_OK):
        return (f"no read/write access to {dev_kfd} (add the user to the 'render' and "
                "'video' groups)")
    return None
