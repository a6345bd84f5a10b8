"""Triton kernel tests: on a CUDA GPU when there is one, else in Triton's CPU interpreter
(chosen for the whole session by tests/conftest.py, before anything imports triton)."""

from __future__ import annotations

import pytest
import torch

ON_GPU = torch.cuda.is_available()


@pytest.fixture(scope="session")
def device() -> str:
    """Where the kernels run: "cuda", or "cpu" under the interpreter."""
    if ON_GPU:
        return "cuda"
    from pagoda.kernels.triton.common import interpreted
    from pagoda.kernels.triton.norm import _rms_norm_kernel

    if not interpreted(_rms_norm_kernel):
        pytest.skip("Triton kernels were imported before TRITON_INTERPRET=1 was set and no "
                    "GPU is visible: run tests/kernels in a fresh pytest process")
    return "cpu"
