"""A platform plugin declared with `PlatformPlugin`, installed with an entry point that names
the object: discovery registers its hook methods, its probe is called by name, and its
Platform module is imported only when its own name is asked for, after its environment
defaults are set."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_harness import run_python, write_plugin_distribution

ENTRY = """
    from pagoda.plugins import (PLUGIN_API_VERSION, AttentionBackendSpec, KernelProvider,
                                PlatformPlugin, QuantMethodSpec)

    HEAVY = "fake_pagoda_bolt_platform"

    plugin = PlatformPlugin(
        "bolt", "0.4.0", api_version=PLUGIN_API_VERSION, package="pagoda-fake-bolt",
        verified_on="no Bolt hardware yet", description="Bolt cards",
        probe="fake_pagoda_bolt_probe:probe", platform=HEAVY + ":BoltPlatform",
        env_defaults={"BOLT_RUNTIME": "cards", "BOLT_LOG": "quiet"},
        attention_backends=[AttentionBackendSpec("bolt_attn", HEAVY + ":BoltAttention",
                                                 ("bolt",), 50)],
        kernel_providers=[KernelProvider("rms_norm", "bolt_rms", HEAVY + ":rms_norm",
                                         ("bolt",), 50)],
        quant_methods=[QuantMethodSpec("bolt_int4", HEAVY + ":BoltInt4", ("bolt",))],
    )
"""

PROBE = """
    from pagoda.platforms.probing import platform_probe

    def probe():
        return platform_probe("bolt", ["Bolt B1"], [], score=50,
                              visible_devices_env=("BOLT_VISIBLE_CARDS",))
"""

HEAVY = """
    import os

    import torch
    from pagoda.attention.reference import ReferenceAttentionBackend
    from pagoda.ops import reference
    from pagoda.platforms import MemoryInfo, Platform

    ENV_AT_IMPORT = {name: os.environ.get(name) for name in ("BOLT_RUNTIME", "BOLT_LOG")}

    class BoltPlatform(Platform):
        name = "bolt"
        device_type = "cpu"
        supported_dtypes = (torch.float32,)
        distributed_backend = "gloo"
        preferred_attention_backends = ("bolt_attn",)

        def device_count(self):
            return 1

        def device_name(self, index=0):
            return "Bolt B1"

        def memory_info(self, index=0):
            return MemoryInfo(8 << 30, 4 << 30)

    class BoltAttention(ReferenceAttentionBackend):
        name = "bolt_attn"

    class BoltInt4:
        pass

    def rms_norm(x, weight, eps):
        return reference.rms_norm(x, weight, eps)
"""

SCRIPT = """
import json, sys
from pagoda.platforms import resolve_platform
from pagoda.plugins import get_registries

regs = get_registries()
record = regs.record("bolt")
heavy = "fake_pagoda_bolt_platform"
imported_at_discovery = heavy in sys.modules
other = regs.call_plugin("bolt", "pagoda_platform_factory", name="cpu")
imported_for_another_name = heavy in sys.modules
platform = resolve_platform("bolt")
probe = regs.probes.get("bolt")
print(json.dumps({
    "plugin": type(regs.plugin_object("bolt")).__name__,
    "record": [record.status, record.distribution, record.version, record.api_version,
               record.verified_on],
    "probe": [probe.plugin, probe.spec.usable, probe.spec.score, list(probe.spec.devices),
              list(probe.spec.visible_devices_env)],
    "imported_at_discovery": imported_at_discovery,
    "factory_for_another_name": repr(other),
    "imported_for_another_name": imported_for_another_name,
    "platform": type(platform).__name__,
    "env_at_import": sys.modules[heavy].ENV_AT_IMPORT,
    "attention": [e.spec.name for e in regs.attention_backends if e.plugin == "bolt"],
    "kernels": [e.spec.name for e in regs.kernels if e.plugin == "bolt"],
    "quant": [e.spec.name for e in regs.quant_methods if e.plugin == "bolt"],
}))
"""


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root: Path = tmp_path_factory.mktemp("bolt")
    write_plugin_distribution(root, "bolt", ENTRY, version="0.4.0", attribute="plugin",
                              modules={"fake_pagoda_bolt_platform": HEAVY,
                                       "fake_pagoda_bolt_probe": PROBE})
    result = run_python(["-c", SCRIPT], pythonpath=root, BOLT_LOG="loud")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_entry_point_object_is_the_plugin(outcome: dict[str, Any]) -> None:
    assert outcome["plugin"] == "PlatformPlugin"
    assert outcome["record"] == ["loaded", "pagoda-fake-bolt", "0.4.0", 3,
                                 "no Bolt hardware yet"]


def test_its_probe_is_called_by_name(outcome: dict[str, Any]) -> None:
    assert outcome["probe"] == ["bolt", True, 50, ["Bolt B1"], ["BOLT_VISIBLE_CARDS"]]


def test_its_platform_is_imported_only_for_its_own_name(outcome: dict[str, Any]) -> None:
    assert outcome["imported_at_discovery"] is False
    assert outcome["factory_for_another_name"] == "None"
    assert outcome["imported_for_another_name"] is False
    assert outcome["platform"] == "BoltPlatform"


def test_environment_defaults_are_set_before_the_import(outcome: dict[str, Any]) -> None:
    """Unset ones take the default; one the user set is left as it is."""
    assert outcome["env_at_import"] == {"BOLT_RUNTIME": "cards", "BOLT_LOG": "loud"}


def test_its_specs_are_registered(outcome: dict[str, Any]) -> None:
    assert outcome["attention"] == ["bolt_attn"]
    assert outcome["kernels"] == ["bolt_rms"]
    assert outcome["quant"] == ["bolt_int4"]
