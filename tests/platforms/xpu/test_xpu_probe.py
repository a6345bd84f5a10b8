"""pagoda-xpu's probe, on this machine and on fake sysfs/dev trees: which Intel GPUs this
process may use, or why XPU is unusable, without importing torch or opening a device."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("pagoda_xpu", reason="pagoda-xpu is not installed")

from pagoda_xpu import drm  # noqa: E402
from pagoda_xpu.drm import GpuInfo, intel_gpus, visible_gpus  # noqa: E402
from pagoda_xpu.probe import find_gpus, probe, torch_build_problem  # noqa: E402

PROBE = """
import json, sys
from pagoda_xpu.probe import probe
p = probe()
print(json.dumps({"usable": p.usable, "score": p.score, "devices": list(p.devices),
                  "reason": p.reason, "torch_imported": "torch" in sys.modules}))
"""

MAX_1550 = GpuInfo("renderD128", "0x0bd5", "i915")
ARC_B580 = GpuInfo("renderD130", "0xe20b", "xe")


def test_probe_on_this_machine_imports_no_torch_and_says_why() -> None:
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["torch_imported"] is False
    if getattr(torch.version, "xpu", None):
        pytest.skip("an XPU build of torch: the probe may be usable here")
    assert not found["usable"] and found["score"] == 0
    assert (f"torch {torch.__version__} is not an XPU build (torch.version.xpu is None)"
            in found["reason"])


def _render_node(sys_drm: Path, dev_dri: Path, name: str, vendor: str, device: str,
                 driver: str) -> None:
    pci = sys_drm.parent.parent / "devices" / name
    pci.mkdir(parents=True)
    drivers = sys_drm.parent.parent / "bus" / "pci" / "drivers" / driver
    drivers.mkdir(parents=True, exist_ok=True)
    (pci / "vendor").write_text(f"{vendor}\n")
    (pci / "device").write_text(f"{device}\n")
    (pci / "driver").symlink_to(drivers)
    (sys_drm / name).mkdir(parents=True)
    (sys_drm / name / "device").symlink_to(pci)
    (dev_dri / name).touch()


@pytest.fixture
def host(tmp_path: Path) -> tuple[Path, Path]:
    """Two Intel GPUs (i915 and xe) around an AMD one, as sysfs and /dev/dri show them,
    and a torch whose version.py says it is an XPU build."""
    sys_drm, dev_dri = tmp_path / "sys" / "class" / "drm", tmp_path / "dev" / "dri"
    sys_drm.mkdir(parents=True)
    dev_dri.mkdir(parents=True)
    (sys_drm / "card0").mkdir()  # display nodes are not render nodes
    _render_node(sys_drm, dev_dri, "renderD130", "0x8086", "0xe20b", "xe")
    _render_node(sys_drm, dev_dri, "renderD128", "0x8086", "0x0bd5", "i915")
    _render_node(sys_drm, dev_dri, "renderD129", "0x1002", "0x74a1", "amdgpu")
    torch_dir = tmp_path / "torch"
    torch_dir.mkdir()
    (torch_dir / "version.py").write_text(
        "__version__ = '2.8.0+xpu'\nxpu: Optional[str] = '20250101'\n")
    return sys_drm, dev_dri


def test_intel_render_nodes(host: tuple[Path, Path]) -> None:
    sys_drm, _ = host
    assert intel_gpus(sys_drm) == [MAX_1550, ARC_B580]
    assert intel_gpus(sys_drm.parent / "missing") is None
    assert MAX_1550.describe() == "Intel GPU [8086:0bd5] (renderD128, i915)"


def test_probe_with_a_fake_intel_host(host: tuple[Path, Path], tmp_path: Path) -> None:
    sys_drm, dev_dri = host
    found = probe(sys_drm, dev_dri, environ={}, torch_dir=tmp_path / "torch")
    assert (found.name, found.usable, found.score, found.reason) == ("xpu", True, 100, None)
    assert found.devices == ("Intel GPU [8086:0bd5] (renderD128, i915)",
                             "Intel GPU [8086:e20b] (renderD130, xe)")
    assert found.visible_devices_env == ("ZE_AFFINITY_MASK",)


@pytest.mark.parametrize(("mask", "expected"), [
    (None, [MAX_1550, ARC_B580]),
    ("", [MAX_1550, ARC_B580]),
    ("1", [ARC_B580]),
    ("0.0,0.1", [MAX_1550]),  # two tiles of one card
    ("1,0", [MAX_1550, ARC_B580]),
    ("7", []),
])
def test_affinity_mask(mask: str | None, expected: list[GpuInfo]) -> None:
    assert visible_gpus([MAX_1550, ARC_B580], mask) == expected


def test_reasons(host: tuple[Path, Path], tmp_path: Path,
                 monkeypatch: pytest.MonkeyPatch) -> None:
    sys_drm, dev_dri = host
    assert find_gpus(sys_drm, dev_dri, {"ZE_AFFINITY_MASK": "5"}) == (
        [], "ZE_AFFINITY_MASK='5' hides all 2 Intel GPUs")
    assert find_gpus(tmp_path / "none", dev_dri, {}) == (
        [], f"no Intel GPU visible: no GPU driver found (no {tmp_path / 'none'})")
    amd_only = tmp_path / "amd" / "class" / "drm"
    amd_only.mkdir(parents=True)
    _render_node(amd_only, dev_dri, "renderD140", "0x1002", "0x74a1", "amdgpu")
    assert find_gpus(amd_only, dev_dri, {}) == (
        [], f"no Intel GPU visible: no render node of vendor 0x8086 in {amd_only}")
    monkeypatch.setattr(drm.os, "access", lambda path, mode: False)
    assert find_gpus(sys_drm, dev_dri, {}) == (
        [], f"Intel GPUs found but not usable: no read/write access to {dev_dri}/renderD128 "
            "(add the user to the 'render' group)")
    (dev_dri / "renderD128").unlink()
    assert find_gpus(sys_drm, dev_dri, {})[1] == (
        f"Intel GPUs found but not usable: {dev_dri}/renderD128 is missing (in a container, "
        "pass --device=/dev/dri)")


def test_torch_build_problem(tmp_path: Path) -> None:
    (tmp_path / "version.py").write_text("__version__ = '2.8.0+cu128'\nxpu = None\n")
    assert torch_build_problem(tmp_path) == (
        "torch 2.8.0+cu128 is not an XPU build (torch.version.xpu is None); install one from "
        "https://download.pytorch.org/whl/xpu")
    (tmp_path / "version.py").write_text("__version__ = '2.8.0+xpu'\nxpu = '20250101'\n")
    assert torch_build_problem(tmp_path) is None
