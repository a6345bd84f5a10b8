"""The host's NVIDIA GPUs, read without CUDA: NVML through ctypes, else the driver's files
(/proc/driver/nvidia, then the /dev/nvidiaN device nodes).

Neither opens a CUDA context nor imports torch (the same NVML calls torch makes for
PYTORCH_NVML_BASED_CUDA_CHECK=1), so a probe stays cheap and fork-safe.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

PROC_GPUS = Path("/proc/driver/nvidia/gpus")
DEV = Path("/dev")


@dataclass(frozen=True)
class GpuInfo:
    name: str
    uuid: str
    memory_bytes: int = 0  # 0: unknown

    def describe(self) -> str:
        if not self.memory_bytes:
            return self.name
        return f"{self.name} ({self.memory_bytes / 2**30:.0f} GiB)"


class NvmlError(RuntimeError):
    """NVML is missing or failed; the message says which call."""


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


def nvml_gpus() -> list[GpuInfo]:
    """Every GPU the NVIDIA driver sees, in NVML (PCI bus) order."""
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as exc:
        raise NvmlError("libnvidia-ml.so.1 cannot be loaded") from exc
    lib.nvmlErrorString.restype = ctypes.c_char_p

    def check(status: int, call: str) -> None:
        if status != 0:
            raise NvmlError(f"{call}: {lib.nvmlErrorString(status).decode()}")

    check(lib.nvmlInit_v2(), "nvmlInit")
    try:
        count = ctypes.c_uint()
        check(lib.nvmlDeviceGetCount_v2(ctypes.byref(count)), "nvmlDeviceGetCount")
        gpus = []
        for index in range(count.value):
            handle = ctypes.c_void_p()
            check(lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)),
                  "nvmlDeviceGetHandleByIndex")
            name, uuid = ctypes.create_string_buffer(96), ctypes.create_string_buffer(96)
            check(lib.nvmlDeviceGetName(handle, name, 96), "nvmlDeviceGetName")
            check(lib.nvmlDeviceGetUUID(handle, uuid, 96), "nvmlDeviceGetUUID")
            memory = _Memory()  # unavailable on some MIG setups: left unknown then
            known = lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) == 0
            gpus.append(GpuInfo(name.value.decode(), uuid.value.decode(),
                                memory.total if known else 0))
        return gpus
    finally:
        lib.nvmlShutdown()


def proc_gpus(root: Path = PROC_GPUS) -> list[GpuInfo] | None:
    """GPUs listed by the kernel driver under /proc (no memory sizes); None without it."""
    if not root.is_dir():
        return None
    gpus = []
    for info in sorted(root.glob("*/information")):
        fields = dict(line.split(":", 1) for line in info.read_text().splitlines() if ":" in line)
        gpus.append(GpuInfo(fields.get("Model", "NVIDIA GPU").strip(),
                            fields.get("GPU UUID", "").strip()))
    return gpus


def driver_gpus(proc: Path = PROC_GPUS, dev: Path = DEV) -> tuple[list[GpuInfo], str] | None:
    """GPUs listed by the kernel driver, and where (no memory sizes); None without a driver.
    /proc names the models; sandboxes that hide /proc/driver still show /dev/nvidiaN."""
    listed = proc_gpus(proc)
    if listed is not None:
        return listed, str(proc.parent)
    nodes = sorted(p for p in dev.glob("nvidia[0-9]*") if p.name[6:].isdigit())
    if nodes or (dev / "nvidiactl").exists():
        return [GpuInfo("NVIDIA GPU", "") for _ in nodes], f"{dev}/nvidia*"
    return None


def visible_gpus(gpus: list[GpuInfo], cuda_visible_devices: str | None) -> list[GpuInfo]:
    """The GPUs CUDA will show under CUDA_VISIBLE_DEVICES: indices or GPU-/MIG- UUIDs,
    read up to the first entry CUDA would reject. Indices follow PCI bus order (set
    CUDA_DEVICE_ORDER=PCI_BUS_ID on hosts with mixed GPU models)."""
    if cuda_visible_devices is None:
        return list(gpus)
    chosen: list[GpuInfo] = []
    for item in (s.strip() for s in cuda_visible_devices.split(",")):
        if item.isdigit() and int(item) < len(gpus):
            chosen.append(gpus[int(item)])
        elif item.startswith("GPU-") and len(found := [g for g in gpus
                                                       if g.uuid.startswith(item)]) == 1:
            chosen.append(found[0])
        elif item.startswith("MIG-"):
            chosen.append(GpuInfo(f"MIG instance {item}", item))
        else:
            break
    return chosen
