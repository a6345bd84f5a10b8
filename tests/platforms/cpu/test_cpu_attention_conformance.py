"""Every attention backend that runs on `cpu` (cpu_sdpa, reference) matches the reference
on random paged mixed batches, with a cache of the model's dtype and with an fp8 cache;
cpu_sdpa declines soft-capping, and only that."""

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
SOFT_CAPPED = {c.label for c in ATTENTION_CASES if c.logits_soft_cap is not None}


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
    declined = {s.split(": ", 1)[0] for s in report.skipped}
    assert declined == (SOFT_CAPPED if entry.name == "cpu_sdpa" else set())
    assert len(report.checked) == len(ATTENTION_CASES) - len(declined)
