"""pagoda-rocm's probe, on this machine and on fake sysfs/dev trees: which AMD GPUs HIP
would show, or why ROCm is unusable, without importing torch or opening a device."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

pytest.importorskip("pagoda_rocm", reason="pagoda-rocm is not installed")

from pagoda_rocm import kfd  # noqa: E402
from pagoda_rocm.kfd import GpuInfo, gfx_name, kfd_gpus, visible_gpus  # noqa: E402
from pagoda_rocm.probe import find_gpus, probe, torch_build_problem  # noqa: E402

PROBE = """
import json, sys
from pagoda_rocm.probe import probe
p = probe()
print(json.dumps({"usable": p.usable, "score": p.score, "devices": list(p.devices),
                  "reason": p.reason, "torch_imported": "torch" in sys.modules}))
"""

GIB = 2**30


def test_probe_on_this_machine_imports_no_torch_and_says_why() -> None:
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["torch_imported"] is False
    if torch.version.hip is not None and Path("/dev/kfd").exists():
        pytest.skip("a ROCm machine: the probe may be usable here")
    assert not found["usable"] and found["score"] == 0
    if torch.version.hip is None:
        assert (f"torch {torch.__version__} is not a ROCm build (torch.version.hip is None)"
                in found["reason"])
    if not Path("/sys/class/kfd").exists():
        assert "no AMD GPU visible: no amdgpu driver found" in found["reason"]


def _node(nodes: Path, index: int, **props: int) -> None:
    node = nodes / str(index)
    node.mkdir(parents=True)
    (node / "properties").write_text("".join(f"{k} {v}\n" for k, v in props.items()))


@pytest.fixture
def host(tmp_path: Path) -> tuple[Path, Path]:
    """A KFD topology with a CPU node and three GPUs (nodes 1, 2 and 10, to check numeric
    order), a read/write /dev/kfd, and a torch whose version.py says it is a HIP build."""
    nodes = tmp_path / "sys" / "class" / "kfd" / "kfd" / "topology" / "nodes"
    _node(nodes, 0, cpu_cores_count=96, simd_count=0, gfx_target_version=0)
    _node(nodes, 1, cpu_cores_count=0, simd_count=1216, gfx_target_version=90402,
          local_mem_size=192 * GIB, unique_id=0x1A2B3C4D5E6F7081)
    _node(nodes, 10, cpu_cores_count=0, simd_count=440, gfx_target_version=90010)
    _node(nodes, 2, cpu_cores_count=0, simd_count=1216, gfx_target_version=90402,
          local_mem_size=192 * GIB, unique_id=0x99)
    dev_kfd = tmp_path / "dev" / "kfd"
    dev_kfd.parent.mkdir()
    dev_kfd.touch()
    torch_dir = tmp_path / "torch"
    torch_dir.mkdir()
    (torch_dir / "version.py").write_text(
        "__version__ = '2.7.1+rocm6.3'\ncuda: Optional[str] = None\n"
        "hip: Optional[str] = '6.3.42131-fa1d09cbd'\n")
    return nodes, dev_kfd


MI300X = GpuInfo("AMD GPU", "gfx942", 192 * GIB, "GPU-1a2b3c4d5e6f7081")
MI300X_B = GpuInfo("AMD GPU", "gfx942", 192 * GIB, "GPU-0000000000000099")
MI250X = GpuInfo("AMD GPU", "gfx90a")


@pytest.mark.parametrize(("version", "arch"), [
    (90402, "gfx942"), (90010, "gfx90a"), (90500, "gfx950"), (90008, "gfx908"),
    (110000, "gfx1100"), (110501, "gfx1151"), (120001, "gfx1201"),
])
def test_gfx_name(version: int, arch: str) -> None:
    assert gfx_name(version) == arch


def test_kfd_topology_lists_gpus_in_rocr_order(host: tuple[Path, Path]) -> None:
    nodes, _ = host
    assert kfd_gpus(nodes) == [MI300X, MI300X_B, MI250X]
    assert kfd_gpus(nodes.parent / "missing") is None
    assert MI300X.describe() == "AMD GPU (gfx942, 192 GiB)"
    assert MI250X.describe() == "AMD GPU (gfx90a)"


def test_probe_with_a_fake_rocm_host(host: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, dev_kfd = host
    found = probe(nodes, dev_kfd, environ={}, torch_dir=tmp_path / "torch")
    assert (found.name, found.usable, found.score, found.reason) == ("rocm", True, 100, None)
    assert found.devices == ("AMD GPU (gfx942, 192 GiB)",) * 2 + ("AMD GPU (gfx90a)",)
    assert found.visible_devices_env == ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                                         "CUDA_VISIBLE_DEVICES")


def test_probe_names_every_problem(host: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, dev_kfd = host
    (tmp_path / "torch" / "version.py").write_text(
        "__version__ = '2.7.1+cu126'\nhip: Optional[str] = None\n")
    dev_kfd.unlink()
    found = probe(nodes, dev_kfd, environ={}, torch_dir=tmp_path / "torch")
    assert not found.usable and found.devices == ()
    assert found.reason == (
        "torch 2.7.1+cu126 is not a ROCm build (torch.version.hip is None); install one from "
        "https://download.pytorch.org/whl/rocm*; AMD GPUs found but not usable: "
        f"{dev_kfd} is missing (in a container, pass --device=/dev/kfd --device=/dev/dri)")


def test_torch_build_problem(tmp_path: Path) -> None:
    assert torch_build_problem(tmp_path) is None  # no version.py: cannot tell cheaply
    (tmp_path / "version.py").write_text("__version__ = '2.8.0+cpu'\nhip = None\n")
    assert torch_build_problem(tmp_path).startswith("torch 2.8.0+cpu is not a ROCm build")
    (tmp_path / "version.py").write_text("__version__ = '2.8.0+rocm6.4'\nhip = '6.4.1'\n")
    assert torch_build_problem(tmp_path) is None


@pytest.mark.parametrize(("environ", "expected"), [
    ({}, [MI300X, MI300X_B, MI250X]),
    ({"HIP_VISIBLE_DEVICES": "2,0"}, [MI250X, MI300X]),
    ({"CUDA_VISIBLE_DEVICES": "1"}, [MI300X_B]),
    ({"HIP_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "1"}, [MI300X]),  # HIP_ wins
    ({"ROCR_VISIBLE_DEVICES": "1,2", "HIP_VISIBLE_DEVICES": "1"}, [MI250X]),  # HIP indexes
    ({"ROCR_VISIBLE_DEVICES": "GPU-1a2b"}, [MI300X]),
    ({"ROCR_VISIBLE_DEVICES": "0,5,1"}, [MI300X]),  # read up to the first unknown entry
    ({"HIP_VISIBLE_DEVICES": ""}, []),
    ({"HIP_VISIBLE_DEVICES": "-1"}, []),
])
def test_visible_devices(environ: dict[str, str], expected: list[GpuInfo]) -> None:
    assert visible_gpus([MI300X, MI300X_B, MI250X], environ)[0] == expected


def test_reasons_when_gpus_are_hidden_missing_or_locked(host: tuple[Path, Path],
                                                        tmp_path: Path) -> None:
    nodes, dev_kfd = host
    assert find_gpus(nodes, dev_kfd, {"ROCR_VISIBLE_DEVICES": "7"}) == (
        [], "ROCR_VISIBLE_DEVICES='7' hides all 3 AMD GPUs")
    assert find_gpus(nodes, dev_kfd, {"ROCR_VISIBLE_DEVICES": "0", "HIP_VISIBLE_DEVICES": "1"}) \
        == ([], "ROCR_VISIBLE_DEVICES='0' and HIP_VISIBLE_DEVICES='1' hides all 3 AMD GPUs")
    cpu_only = tmp_path / "cpu-only"
    _node(cpu_only, 0, cpu_cores_count=8, simd_count=0, gfx_target_version=0)
    assert find_gpus(cpu_only, dev_kfd, {}) == (
        [], f"no AMD GPU visible: the amdgpu driver lists none ({cpu_only})")


def test_device_access_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = tmp_path / "kfd"
    assert "is missing" in kfd.device_access_problem(node)
    node.touch()
    assert kfd.device_access_problem(node) is None
    monkeypatch.setattr(kfd.os, "access", lambda path, mode: False)  # a user without groups
    assert kfd.device_access_problem(node) == (
        f"no read/write access to {node} (add the user to the 'render' and 'video' groups)")


def test_without_topology_amdsmi_is_asked(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """No KFD topology: amdsmi, when importable, lists the GPUs. The module here is a stand-in
    answering with the shapes amdsmi's Python API documents; no GPU is involved."""
    calls: list[str] = []
    fake = types.ModuleType("amdsmi")
    fake.AmdSmiException = type("AmdSmiException", (Exception,), {})  # type: ignore[attr-defined]
    fake.amdsmi_init = lambda: calls.append("init")  # type: ignore[attr-defined]
    fake.amdsmi_shut_down = lambda: calls.append("shut_down")  # type: ignore[attr-defined]
    fake.amdsmi_get_processor_handles = lambda: ["h0"]  # type: ignore[attr-defined]
    fake.amdsmi_get_gpu_asic_info = lambda h: {  # type: ignore[attr-defined]
        "market_name": "AMD Instinct MI300X", "target_graphics_version": "gfx942"}
    fake.amdsmi_get_gpu_vram_usage = lambda h: {  # type: ignore[attr-defined]
        "vram_total": 196592, "vram_used": 282}
    monkeypatch.setitem(sys.modules, "amdsmi", fake)
    dev_kfd = tmp_path / "kfd"
    dev_kfd.touch()
    gpus, reason = find_gpus(tmp_path / "no-topology", dev_kfd, {})
    assert reason is None and calls == ["init", "shut_down"]
    assert [g.describe() for g in gpus] == ["AMD Instinct MI300X (gfx942, 192 GiB)"]

    def broken() -> None:
        raise fake.AmdSmiException("AMDSMI_STATUS_DRIVER_NOT_LOADED")

    fake.amdsmi_init = broken  # type: ignore[attr-defined]
    assert find_gpus(tmp_path / "no-topology", dev_kfd, {}) == (
        [], f"no AMD GPU visible: no amdgpu driver found (no {tmp_path / 'no-topology'}; "
            "amdsmi failed: AMDSMI_STATUS_DRIVER_NOT_LOADED)")
