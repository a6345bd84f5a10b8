"""`pagoda collect-env --json` has the keys it promises, lists the pagoda packages and, for
each platform, the variables that choose its visible devices (named by its probe)."""

from __future__ import annotations

import os
import sys
from importlib import metadata
from typing import Any

import pytest
import torch
from cli_harness import run_pagoda

KEYS = {"os", "machine", "cpu_count", "python", "python_executable", "torch",
        "pagoda_packages", "devices", "failed_plugins", "env"}
TORCH_KEYS = {"version", "debug", "cuda", "hip", "num_threads", "build"}


VISIBLE = {"CUDA_VISIBLE_DEVICES": "1", "ZE_AFFINITY_MASK": "0.1"}


@pytest.fixture(scope="module")
def env() -> dict[str, Any]:
    result = run_pagoda("collect-env", "--json", PAGODA_DEVICE="cpu", OMP_NUM_THREADS="1",
                        **VISIBLE)
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr  # no plugin failed
    return result.json()


def test_has_promised_keys(env: dict[str, Any]) -> None:
    assert set(env) == KEYS
    assert set(env["torch"]) == TORCH_KEYS


def test_describes_this_interpreter(env: dict[str, Any]) -> None:
    assert env["python"] == sys.version.split()[0]
    assert env["python_executable"] == sys.executable
    assert env["cpu_count"] == os.cpu_count()
    assert env["torch"]["version"] == torch.__version__
    assert env["torch"]["num_threads"] == 1


def test_lists_pagoda_packages(env: dict[str, Any]) -> None:
    for dist in ("pagoda", "pagoda-cpu", "pagoda-plugin-template", "pagoda-server"):
        assert env["pagoda_packages"][dist] == metadata.version(dist)
    assert all(name.lower().startswith("pagoda") for name in env["pagoda_packages"])


def test_lists_devices_and_pagoda_env(env: dict[str, Any]) -> None:
    devices = {d["platform"]: d for d in env["devices"]}
    assert devices["cpu"]["plugin"] == "cpu" and devices["cpu"]["usable"] is True
    assert devices["template"]["score"] == 1
    assert env["failed_plugins"] == {}
    assert env["env"]["PAGODA_DEVICE"] == "cpu" and env["env"]["OMP_NUM_THREADS"] == "1"


def _value(name: str) -> str | None:
    return VISIBLE.get(name, os.environ.get(name))


def test_shows_each_platforms_visible_devices_variables(env: dict[str, Any]) -> None:
    chosen_by = {d["platform"]: d["visible_devices_env"] for d in env["devices"]}
    assert chosen_by["cpu"] == chosen_by["template"] == {}
    assert chosen_by["cuda"] == {"CUDA_VISIBLE_DEVICES": "1"}
    assert chosen_by["xpu"] == {"ZE_AFFINITY_MASK": "0.1"}
    rocm = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
    assert chosen_by["rocm"] == {name: _value(name) for name in rocm}
    assert chosen_by["gaudi"] == {"HABANA_VISIBLE_MODULES": _value("HABANA_VISIBLE_MODULES")}
    assert chosen_by["tpu"] == {"TPU_VISIBLE_CHIPS": _value("TPU_VISIBLE_CHIPS")}
    assert not any(name.startswith(("CUDA_", "ZE_")) for name in env["env"])


def test_text_shows_values_or_unset() -> None:
    result = run_pagoda("collect-env", CUDA_VISIBLE_DEVICES="1", HABANA_VISIBLE_MODULES="")
    assert result.returncode == 0, result.stderr
    lines = [line.strip() for line in result.stdout.splitlines()]
    cpu = lines.index(next(line for line in lines if line.startswith("{'platform': 'cpu'")))
    assert lines[cpu + 1] == "visible-devices variables: (none)"
    assert "visible-devices variables: CUDA_VISIBLE_DEVICES=1" in lines
    assert "visible-devices variables: HABANA_VISIBLE_MODULES=" in lines
    if "TPU_VISIBLE_CHIPS" not in os.environ:
        assert "visible-devices variables: TPU_VISIBLE_CHIPS unset" in lines
