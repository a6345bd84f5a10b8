"""pagoda-rocm's kernel wrappers against core's references, in Triton's CPU interpreter.

The interpreter ignores launch parameters, so this checks what the wrappers add to the
shared kernels (the launch choice per device, argument passing) and nothing an AMD GPU
does; compile_rocm.py checks the parameters compile for AMD targets."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("pagoda_rocm", reason="pagoda-rocm is not installed")
pytest.importorskip("triton")

from pagoda.kernels.triton.common import interpreted  # noqa: E402
from pagoda.kernels.triton.norm import _rms_norm_kernel  # noqa: E402
from pagoda.kernels.triton_providers import TRITON_OPS  # noqa: E402
from pagoda.testing import check_attention_backend, check_op  # noqa: E402
from pagoda.testing.op_cases import CASE_GENERATORS  # noqa: E402
from pagoda_rocm import triton_ops  # noqa: E402
from pagoda_rocm.attention import RocmTritonAttentionBackend  # noqa: E402
from pagoda_rocm.launch import launch_for_arch  # noqa: E402

pytestmark = pytest.mark.skipif(
    not interpreted(_rms_norm_kernel),
    reason="the Triton kernels were imported before TRITON_INTERPRET=1 was set: run "
           "tests/platforms/rocm in a fresh pytest process")


@pytest.fixture
def gfx942_launches(monkeypatch: pytest.MonkeyPatch) -> list[torch.device]:
    """Every device's launch parameters are gfx942's; records the devices asked about."""
    asked: list[torch.device] = []

    def device_launch(device: torch.device):
        asked.append(device)
        return launch_for_arch("gfx942")

    monkeypatch.setattr(triton_ops, "device_launch", device_launch)
    return asked


@pytest.mark.parametrize("op", TRITON_OPS)
def test_wrapped_ops_match_the_reference(op: str, gfx942_launches: list[torch.device]) -> None:
    if op not in CASE_GENERATORS:
        pytest.skip(f"core has no conformance inputs for {op!r} yet")
    report = check_op(op, getattr(triton_ops.KERNELS, op), torch.float32, seed=3)
    report.raise_for_failures()
    assert report.checked and gfx942_launches
    assert all(d.type == "cpu" for d in gfx942_launches)


def test_attention_backend_matches_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    from pagoda_rocm import attention

    asked: list[torch.device] = []
    monkeypatch.setattr(attention, "device_launch",
                        lambda device: asked.append(device) or launch_for_arch("gfx942"))
    report = check_attention_backend(RocmTritonAttentionBackend, torch.float32, seed=4)
    report.raise_for_failures()
    assert report.checked and asked
