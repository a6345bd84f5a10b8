"""Core's probe helpers (`pagoda.platforms.probing`), on temporary trees and this
interpreter's real torch: torch's build read from version.py, modules found without an
import, sysfs attributes, and a probe assembled from devices and problems. None of them
imports torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pagoda.platforms.probing import (
    installed_torch_dir,
    missing_module,
    platform_probe,
    read_attribute,
    torch_build_problem,
    visible_devices,
)

NOT_BUILT = "lacks that build"


@pytest.mark.parametrize(("version_py", "build", "problem"), [
    ("__version__ = '2.9.0+cu128'\ncuda: Optional[str] = '12.8'\nhip: Optional[str] = None\n",
     "cuda", None),
    ("__version__ = '2.9.0+cu128'\ncuda: Optional[str] = '12.8'\nhip: Optional[str] = None\n",
     "hip", "torch 2.9.0+cu128 lacks that build"),
    ("__version__ = '2.8.0+rocm6.4'\ncuda = None\nhip = '6.4.1'\n", "hip", None),
    ("__version__ = '2.8.0+xpu'\nxpu = \"20250101\"\n", "xpu", None),
    ("__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\nxpu = None\n", "xpu",
     "torch 2.13.0+cpu lacks that build"),
    ("cuda = None\n", "cuda", "torch (unknown version) lacks that build"),
    ("__version__ = '2.9.0'\ncudart = '12'\n", "cuda", "torch 2.9.0 lacks that build"),
])
def test_torch_build_from_version_py(tmp_path: Path, version_py: str, build: str,
                                     problem: str | None) -> None:
    (tmp_path / "version.py").write_text(version_py)
    assert torch_build_problem(build, NOT_BUILT, tmp_path) == problem


def test_unreadable_version_py_tells_nothing(tmp_path: Path) -> None:
    assert torch_build_problem("cuda", NOT_BUILT, tmp_path) is None


def test_the_installed_torch() -> None:
    assert installed_torch_dir() == Path(torch.__file__).parent
    for build, version in (("cuda", torch.version.cuda), ("hip", torch.version.hip),
                           ("xpu", getattr(torch.version, "xpu", None))):
        expected = None if version else f"torch {torch.__version__} {NOT_BUILT}"
        assert torch_build_problem(build, NOT_BUILT) == expected


def test_missing_modules_are_found_without_importing_them() -> None:
    assert missing_module("json", "it ships with Python") is None
    assert missing_module("pagoda_no_such_sdk", "pip install pagoda-no-such-sdk") == (
        "pagoda_no_such_sdk is not installed: pip install pagoda-no-such-sdk")
    assert missing_module("pagoda_no_such_sdk.torch", "ask the vendor", what="its bridge") == (
        "pagoda_no_such_sdk.torch (its bridge) is not installed: ask the vendor")
    assert missing_module("json.no_such_part", "nowhere") == (
        "json.no_such_part is not installed: nowhere")


CHECK_NO_TORCH = """
import json, sys
from pagoda.platforms.probing import missing_module, torch_build_problem
torch_build_problem("cuda", "x")
assert missing_module("torch", "pip install torch") is None
print(json.dumps([m for m in ("torch",) if m in sys.modules]))
"""


def test_nothing_heavy_is_imported() -> None:
    result = subprocess.run([sys.executable, "-c", CHECK_NO_TORCH], capture_output=True,
                            text=True, timeout=60, check=True)
    assert json.loads(result.stdout) == []


def test_sysfs_attributes(tmp_path: Path) -> None:
    device = tmp_path / "renderD128" / "device"
    device.mkdir(parents=True)
    (device / "vendor").write_text("0x8086\n")
    assert read_attribute(device / "vendor") == "0x8086"
    assert read_attribute(device / "device") == ""  # missing
    assert read_attribute(device) == ""  # a folder, not an attribute


def test_probe_from_devices_and_problems() -> None:
    usable = platform_probe("acme", (f"ACME A{i}" for i in (1, 2)), [None, ""], score=70,
                            visible_devices_env=("ACME_VISIBLE_CARDS",))
    assert (usable.name, usable.usable, usable.score, usable.reason) == ("acme", True, 70, None)
    assert usable.devices == ("ACME A1", "ACME A2")
    assert usable.visible_devices_env == ("ACME_VISIBLE_CARDS",)
    unusable = platform_probe("acme", ["ACME A1"], ["driver too old", None, "no SDK"],
                              score=70)
    assert (unusable.usable, unusable.score) == (False, 0)
    assert unusable.reason == "driver too old; no SDK"
    assert unusable.devices == ("ACME A1",) and unusable.visible_devices_env == ()


def _by_index(devices: list[str], value: str | None) -> list[str]:
    if value is None:
        return devices
    return [devices[int(i)] for i in value.split(",") if i.isdigit() and int(i) < len(devices)]


def test_visible_devices_by_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    cards = ["A1", "A2"]
    assert visible_devices(cards, "ACME_CARDS", _by_index, "ACME cards", {}) == (cards, None)
    assert visible_devices(cards, "ACME_CARDS", _by_index, "ACME cards",
                           {"ACME_CARDS": "1"}) == (["A2"], None)
    assert visible_devices(cards, "ACME_CARDS", _by_index, "ACME cards",
                           {"ACME_CARDS": "7"}) == ([], "ACME_CARDS='7' hides all 2 ACME cards")
    monkeypatch.setenv("ACME_CARDS", "")
    assert visible_devices(cards, "ACME_CARDS", _by_index, "ACME cards") == (
        [], "ACME_CARDS='' hides all 2 ACME cards")
