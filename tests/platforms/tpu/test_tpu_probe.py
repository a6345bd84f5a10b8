"""pagoda-tpu's probe on any machine: it imports neither torch nor torch_xla, says why the
platform is unusable (torch_xla missing, a mismatched torch, another PJRT device, no TPU),
finds TPUs from sysfs, /dev and the TPU VM environment, and offers XLA's CPU device only
when PJRT_DEVICE=CPU asks for it."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

pytest.importorskip("pagoda_tpu", reason="pagoda-tpu is not installed")

from pagoda_tpu import probe as tpu_probe  # noqa: E402
from pagoda_tpu.probe import find_tpus, probe  # noqa: E402

HAS_XLA = importlib.util.find_spec("torch_xla") is not None

PROBE = """
import json, sys
from pagoda_tpu.probe import probe
p = probe()
print(json.dumps({"usable": p.usable, "score": p.score, "devices": list(p.devices),
                  "reason": p.reason, "imported": sorted(m for m in ("torch", "torch_xla")
                                                         if m in sys.modules)}))
"""


def _run_probe(**env: str) -> dict:
    base = {k: v for k, v in os.environ.items() if k != "PJRT_DEVICE"}
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                            timeout=60, env={**base, **env})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_probe_imports_nothing_heavy_and_says_why() -> None:
    found = _run_probe()
    assert found["imported"] == []
    if not HAS_XLA:
        assert not found["usable"]
        assert found["reason"].startswith("torch_xla is not installed: pip install pagoda-tpu's "
                                          "pins (torch==2.9.0 torch-xla==2.9.0)")
    elif not find_tpus():
        assert not found["usable"] and "set PJRT_DEVICE=CPU" in found["reason"]


@pytest.mark.skipif(not HAS_XLA, reason="torch_xla is not installed")
def test_xla_cpu_device_is_usable_with_a_low_score() -> None:
    found = _run_probe(PJRT_DEVICE="CPU")
    assert found["imported"] == []
    assert (found["usable"], found["score"], found["reason"]) == (True, 2, None)
    assert found["devices"] == ["XLA's CPU device (PJRT_DEVICE=CPU): for testing, not a TPU"]


@pytest.fixture
def xla_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend torch_xla (with a matching torch) is installed."""
    monkeypatch.setattr(tpu_probe, "torch_xla_problem", lambda: None)


def _pci(root: Path, where: str, address: str, vendor: str, device: str) -> None:
    folder = root / where / address
    folder.mkdir(parents=True)
    (folder / "vendor").write_text(vendor + "\n")
    (folder / "device").write_text(device + "\n")


def test_finds_tpu_chips_on_the_pci_bus(tmp_path: Path) -> None:
    _pci(tmp_path, "sys/bus/pci/devices", "0000:00:04.0", "0x1ae0", "0x0063")
    _pci(tmp_path, "sys/bus/pci/devices", "0000:00:05.0", "0x1ae0", "0x0042")  # gVNIC
    _pci(tmp_path, "sys/bus/pci/devices", "0000:00:06.0", "0x10de", "0x2335")  # a GPU
    assert find_tpus(tmp_path, {}) == ["Google TPU chip 0000:00:04.0 (1ae0:0063)"]


def test_finds_accel_nodes_but_not_the_linux_accel_class(tmp_path: Path) -> None:
    (tmp_path / "dev/accel").mkdir(parents=True)  # /dev/accel/accel0: Gaudi, NPUs ...
    assert find_tpus(tmp_path, {}) == []
    for name in ("accel0", "accel1"):
        (tmp_path / "dev" / name).touch()
    assert find_tpus(tmp_path, {}) == ["Google TPU chip /dev/accel0", "Google TPU chip /dev/accel1"]


def test_finds_vfio_groups_holding_a_tpu(tmp_path: Path) -> None:
    (tmp_path / "dev/vfio").mkdir(parents=True)
    for group in ("vfio", "0", "1"):
        (tmp_path / "dev/vfio" / group).touch()
    _pci(tmp_path, "sys/kernel/iommu_groups/1/devices", "0000:00:07.0", "0x1ae0", "0x006f")
    _pci(tmp_path, "sys/kernel/iommu_groups/0/devices", "0000:00:08.0", "0x8086", "0x1234")
    assert find_tpus(tmp_path, {}) == ["Google TPU chip /dev/vfio/1"]


def test_finds_a_tpu_vm_by_its_environment(tmp_path: Path) -> None:
    assert find_tpus(tmp_path, {"TPU_ACCELERATOR_TYPE": "v5litepod-8"}) == [
        "Google TPU (v5litepod-8, from TPU_ACCELERATOR_TYPE)"]
    assert find_tpus(tmp_path, {}) == []


@pytest.mark.usefixtures("xla_installed")
def test_probe_without_a_tpu_points_at_xla_cpu(tmp_path: Path) -> None:
    found = probe(tmp_path, {})
    assert not found.usable
    assert found.reason.startswith("no TPU found")
    assert found.reason.endswith("set PJRT_DEVICE=CPU to use XLA's CPU device for testing")


@pytest.mark.usefixtures("xla_installed")
@pytest.mark.parametrize("pjrt", ["", "TPU", "tpu"])
def test_probe_with_a_tpu(tmp_path: Path, pjrt: str) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/accel0").touch()
    found = probe(tmp_path, {"PJRT_DEVICE": pjrt} if pjrt else {})
    assert (found.usable, found.score, found.devices) == (True, 90, ("Google TPU chip /dev/accel0",))
    assert found.visible_devices_env == ("TPU_VISIBLE_CHIPS",)


@pytest.mark.usefixtures("xla_installed")
def test_probe_offers_xla_cpu_only_when_asked(tmp_path: Path) -> None:
    found = probe(tmp_path, {"PJRT_DEVICE": "cpu"})
    assert (found.usable, found.score) == (True, 2)
    assert "not a TPU" in found.devices[0]


@pytest.mark.usefixtures("xla_installed")
def test_probe_refuses_other_pjrt_devices(tmp_path: Path) -> None:
    found = probe(tmp_path, {"PJRT_DEVICE": "CUDA"})
    assert not found.usable
    assert found.reason.startswith("PJRT_DEVICE=CUDA: pagoda-tpu runs on TPUs")


def test_torch_xla_must_match_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    versions = {"torch-xla": "2.9.0", "torch": "2.13.0+cpu"}
    monkeypatch.setattr(metadata, "version", versions.__getitem__)
    assert tpu_probe.torch_xla_problem() == (
        "torch-xla 2.9.0 needs torch 2.9.*, found torch 2.13.0+cpu: pip install pagoda-tpu's "
        "pins (torch==2.9.0 torch-xla==2.9.0), e.g. pip install pagoda-tpu")
    versions["torch"] = "2.9.0+cu128"
    assert tpu_probe.torch_xla_problem() is None


def _installed() -> bool:
    try:
        return metadata.distribution("pagoda-tpu").version == "0.1.0"
    except metadata.PackageNotFoundError:
        return False


needs_install = pytest.mark.skipif(
    not _installed(), reason="pagoda-tpu is not installed: pip install --no-deps -e platforms/tpu")


@needs_install
def test_listed_by_pagoda_plugins() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PJRT_DEVICE"}
    result = subprocess.run([sys.executable, "-m", "pagoda.cli.main", "plugins", "--json"],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    rec = {p["name"]: p for p in json.loads(result.stdout)["plugins"]}["tpu"]
    assert (rec["status"], rec["distribution"], rec["version"]) == ("loaded", "pagoda-tpu",
                                                                    "0.1.0")
    assert rec["verified_on"].startswith("XLA's CPU device only")
    assert "never run on a TPU" in rec["verified_on"]
    assert rec["attention_backends"] == ["pallas", "xla"]
    assert rec["kernel_providers"] == {}  # core's references serve every op on XLA
    [device] = rec["devices"]
    assert device["name"] == "tpu"
    if not HAS_XLA:
        assert not device["usable"] and "torch_xla is not installed" in device["reason"]
