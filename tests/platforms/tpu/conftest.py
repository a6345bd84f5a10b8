"""pagoda-tpu tests. Those that need torch_xla run on XLA's CPU device only (bash ci/tpu.sh
sets PJRT_DEVICE=CPU): none of them exercises a TPU."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def xla_cpu() -> None:
    """Skip unless torch-xla targets its CPU device in this process."""
    if os.environ.get("PJRT_DEVICE", "").upper() != "CPU":
        pytest.skip("runs on XLA's CPU device: set PJRT_DEVICE=CPU (bash ci/tpu.sh does)")
