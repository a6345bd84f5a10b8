"""The template attention backend (online softmax, block by block) matches the reference
on random paged mixed batches, soft-capping and sliding windows included."""

from __future__ import annotations

import pytest
import torch

from pagoda.testing import (
    ATTENTION_CASES,
    DTYPES,
    BackendEntry,
    attention_backends,
    check_attention_backend,
    dtype_name,
)

BACKENDS = attention_backends("template")


def test_registered_backends() -> None:
    assert [b.id for b in BACKENDS] == ["template/template", "core/reference"]


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("entry", BACKENDS, ids=lambda b: b.id)
def test_backend_matches_reference(entry: BackendEntry, dtype: torch.dtype) -> None:
    report = check_attention_backend(entry.load(), dtype, seed=22)
    report.raise_for_failures()
    assert len(report.checked) == len(ATTENTION_CASES) and not report.skipped
