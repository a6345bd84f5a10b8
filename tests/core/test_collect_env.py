"""`pagoda collect-env --json` has the keys it promises and lists the pagoda packages."""

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


@pytest.fixture(scope="module")
def env() -> dict[str, Any]:
    result = run_pagoda("collect-env", "--json", PAGODA_DEVICE="cpu", OMP_NUM_THREADS="1")
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
