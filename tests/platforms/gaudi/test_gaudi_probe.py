"""pagoda-gaudi's probe, on this machine and on fake sysfs/dev trees: which Gaudi cards
this process may use, or why Gaudi is unusable, without importing the SDK or torch."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pagoda_gaudi", reason="pagoda-gaudi is not installed")

from pagoda_gaudi import accel, probe  # noqa: E402
from pagoda_gaudi.accel import Card, gaudi_cards, visible_cards  # noqa: E402

PROBE = """
import json, sys
from pagoda_gaudi.probe import probe
p = probe()
heavy = [m for m in ("torch", "habana_frameworks") if m in sys.modules]
print(json.dumps({"usable": p.usable, "score": p.score, "devices": list(p.devices),
                  "reason": p.reason, "heavy": heavy}))
"""

HAS_SDK = importlib.util.find_spec("habana_frameworks") is not None


def test_probe_on_this_machine_imports_nothing_heavy_and_says_why() -> None:
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["heavy"] == []
    if HAS_SDK:
        pytest.skip("the Gaudi SDK is installed: the probe may be usable here")
    assert not found["usable"] and found["score"] == 0
    assert found["reason"].startswith(
        "habana_frameworks (the Intel Gaudi PyTorch bridge) is not installed: it comes with "
        "the Intel Gaudi software stack, not from PyPI")


def _card(sys_class: Path, dev: Path, cls: str, node: str, vendor: str, **attrs: str) -> None:
    path = sys_class / cls / node
    (path / "device").mkdir(parents=True)
    (path / "device" / "vendor").write_text(f"{vendor}\n")
    for name, value in attrs.items():
        (path / "device" / name).write_text(f"{value}\n")
    (dev / ("accel" if cls == "accel" else "")).mkdir(parents=True, exist_ok=True)
    (dev / ("accel" if cls == "accel" else "") / node).touch()


@pytest.fixture
def accel_host(tmp_path: Path) -> tuple[Path, Path]:
    """Two Gaudi 2 cards and an NPU on the accel class (nodes 0, 2 and 10)."""
    sys_class, dev = tmp_path / "sys" / "class", tmp_path / "dev"
    _card(sys_class, dev, "accel", "accel10", "0x1da3", device_type="GAUDI2", module_id="5")
    _card(sys_class, dev, "accel", "accel0", "0x1da3", device_type="GAUDI2", module_id="3")
    _card(sys_class, dev, "accel", "accel2", "0x8086")  # an Intel NPU, driven by ivpu
    return sys_class, dev


G2_A = Card("accel0", "GAUDI2", 3)
G2_B = Card("accel10", "GAUDI2", 5)


def test_accel_class_lists_gaudi_cards_only(accel_host: tuple[Path, Path]) -> None:
    sys_class, _ = accel_host
    assert gaudi_cards(sys_class) == ([G2_A, G2_B], "accel")
    assert gaudi_cards(sys_class.parent / "none") is None
    assert G2_A.describe() == "GAUDI2 (accel0, module 3)"
    assert Card("hl1", "").describe() == "Gaudi (hl1)"


def test_legacy_habanalabs_class(tmp_path: Path) -> None:
    sys_class, dev = tmp_path / "class", tmp_path / "dev"
    _card(sys_class, dev, "habanalabs", "hl0", "0x1da3", device_type="GAUDI")
    assert gaudi_cards(sys_class) == ([Card("hl0", "GAUDI")], "")
    assert probe.find_cards(sys_class, dev, {}) == ([Card("hl0", "GAUDI")], None)


@pytest.mark.parametrize(("modules", "expected"), [
    (None, [G2_A, G2_B]), ("", [G2_A, G2_B]), ("5", [G2_B]), ("3,5", [G2_A, G2_B]), ("7", []),
])
def test_visible_modules(modules: str | None, expected: list[Card]) -> None:
    assert visible_cards([G2_A, G2_B], modules) == expected
    assert visible_cards([Card("hl0", "GAUDI")], modules) == [Card("hl0", "GAUDI")]


def test_probe_with_fake_cards(accel_host: tuple[Path, Path],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    sys_class, dev = accel_host
    monkeypatch.setattr(probe, "sdk_missing", lambda: None)  # as if the SDK were installed
    found = probe.probe(sys_class, dev, environ={})
    assert (found.name, found.usable, found.score, found.reason) == ("gaudi", True, 100, None)
    assert found.visible_devices_env == ("HABANA_VISIBLE_MODULES",)
    assert found.devices == ("GAUDI2 (accel0, module 3)", "GAUDI2 (accel10, module 5)")


def test_reasons(accel_host: tuple[Path, Path], tmp_path: Path,
                 monkeypatch: pytest.MonkeyPatch) -> None:
    sys_class, dev = accel_host
    assert probe.find_cards(sys_class, dev, {"HABANA_VISIBLE_MODULES": "0,1"}) == (
        [], "HABANA_VISIBLE_MODULES='0,1' hides all 2 Gaudi cards")
    assert probe.find_cards(tmp_path / "none", dev, {}) == (
        [], f"no Gaudi card visible: no habanalabs device in {tmp_path / 'none'}/accel or "
            f"{tmp_path / 'none'}/habanalabs")
    monkeypatch.setattr(accel.os, "access", lambda path, mode: False)
    assert probe.find_cards(sys_class, dev, {}) == (
        [], f"Gaudi cards found but not usable: no read/write access to {dev}/accel/accel0")
    (dev / "accel" / "accel0").unlink()
    assert probe.find_cards(sys_class, dev, {})[1] == (
        f"Gaudi cards found but not usable: {dev}/accel/accel0 is missing (in a container, "
        "pass the Gaudi devices through)")
