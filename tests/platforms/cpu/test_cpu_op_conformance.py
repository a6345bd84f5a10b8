"""Every kernel provider registered for `cpu` matches core's references in every dtype."""

from __future__ import annotations

import pytest
import torch

from pagoda.ops import OPS
from pagoda.plugins.specs import QUANT_OPS
from pagoda.testing import DTYPES, ProviderEntry, check_kernel_provider, dtype_name
from pagoda.testing import kernel_providers as registered
from pagoda_cpu.plugin import CPU_CSRC_OPS, CPU_OPS, CPU_QUANT_OPS

PROVIDERS = registered("cpu")


def test_registered_providers() -> None:
    found = {(e.op, e.plugin, e.provider.name) for e in PROVIDERS}
    expected = {(op, "core", "reference") for op, spec in OPS.items() if not spec.optional} | {
        (op, "cpu", "cpu_native") for op in CPU_OPS} | {
        (op, "cpu", "cpu_csrc") for op in CPU_CSRC_OPS}
    assert found == expected
    assert set(CPU_QUANT_OPS) == set(QUANT_OPS)  # every quantized linear, by the CPU itself
    assert {e.op for e in PROVIDERS if e.plugin == "core"}.isdisjoint(QUANT_OPS)
    assert [e.provider.name for e in PROVIDERS if e.op == "rms_norm"] == [
        "cpu_csrc", "cpu_native", "reference"]  # priority


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("entry", PROVIDERS, ids=lambda e: e.id)
def test_provider_matches_reference(entry: ProviderEntry, dtype: torch.dtype) -> None:
    report = check_kernel_provider(entry.provider, dtype, plugin=entry.plugin, seed=11)
    report.raise_for_failures()
    assert report.checked and not report.skipped  # the CPU supports every dtype and shape
