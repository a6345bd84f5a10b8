"""Every attention backend that runs on `cpu` (cpu_sdpa, reference) matches the reference
on random paged mixed batches (soft-capped and windowed cases too), with a cache of the
model's dtype and with an fp8 cache; neither declines a case."""

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

BACKENDS = attention_backends("cpu")


def test_registered_backends() -> None:
    assert [b.id for b in BACKENDS] == ["cpu/cpu_sdpa", "core/reference"]


@pytest.mark.parametrize("kv_cache", ["model dtype", "fp8"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("entry", BACKENDS, ids=lambda b: b.id)
def test_backend_matches_reference(entry: BackendEntry, dtype: torch.dtype,
                                   kv_cache: str) -> None:
    kv_cache_dtype = torch.float8_e4m3fn if kv_cache == "fp8" else None
    report = check_attention_backend(entry.load(), dtype, seed=12,
                                     kv_cache_dtype=kv_cache_dtype)
    report.raise_for_failures()
    assert not report.skipped
    assert len(report.checked) == len(ATTENTION_CASES)
