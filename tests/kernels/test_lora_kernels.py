"""The Triton `lora_shrink` and `lora_expand` kernels match core's references.

In the CPU interpreter bfloat16 is left out (its float32 -> bfloat16 conversion truncates,
FACTS.md); on a GPU every dtype is checked."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from pagoda.kernels.triton.lora import lora_expand, lora_shrink  # noqa: E402
from pagoda.testing import DTYPES, check_op, dtype_name  # noqa: E402


def _dtypes() -> list[torch.dtype]:
    return DTYPES if torch.cuda.is_available() else [torch.float32, torch.float16]


@pytest.mark.parametrize("dtype", _dtypes(), ids=dtype_name)
@pytest.mark.parametrize(("op", "impl"), [("lora_shrink", lora_shrink),
                                          ("lora_expand", lora_expand)])
def test_kernel_matches_reference(op: str, impl: object, dtype: torch.dtype,
                                  device: str) -> None:
    report = check_op(op, impl, dtype, device=device, seed=5)
    report.raise_for_failures()
    assert report.checked and not report.skipped
