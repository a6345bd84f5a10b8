"""The `pallas` backend's glue, without the Pallas kernel: its cache layout (keys and values
interleaved per head, a padding block), its writes and the arguments it passes, checked on
the host through torch-xla's own plain-torch reference of the kernel
(`_ragged_paged_attention_nonkernel`). The kernel itself needs a TPU and never runs here."""

from __future__ import annotations

import pytest
import torch

custom_kernel = pytest.importorskip(
    "torch_xla.experimental.custom_kernel",
    reason="torch_xla is not installed (bash ci/tpu.sh runs these)")

from pagoda.attention import AttentionConfig  # noqa: E402
from pagoda.testing import (  # noqa: E402
    ATTENTION_CASES,
    check_attention_backend,
    dtype_name,
)
from pagoda_tpu.pallas import PallasAttentionBackend  # noqa: E402


class HostPallasBackend(PallasAttentionBackend):
    """The pallas backend less its "real TPU, JAX, head size" checks."""

    @classmethod
    def unavailable_reason(cls) -> str | None:
        return None

    @classmethod
    def validate(cls, config: AttentionConfig) -> list[str]:
        return super(PallasAttentionBackend, cls).validate(config)


def _kernel_reference(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, *, sm_scale,
                      sliding_window, soft_cap):
    """torch-xla's reference of the kernel, in float32 (it computes in the input dtype)."""
    out = custom_kernel._ragged_paged_attention_nonkernel(
        q.float(), kv_pages.float(), kv_lens, page_indices, cu_q_lens, num_seqs, None, None,
        sm_scale=sm_scale, sliding_window=sliding_window, soft_cap=soft_cap)
    return out.to(q.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_name)
def test_pallas_glue_matches_reference(monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype) -> None:
    monkeypatch.setattr(custom_kernel, "ragged_paged_attention", _kernel_reference)
    report = check_attention_backend(HostPallasBackend, dtype, seed=9)
    report.raise_for_failures()
    assert len(report.checked) == len(ATTENTION_CASES)
