"""Every kernel provider registered for `template` matches core's references in every dtype;
the template implements the ops it lists, core's references serve any others."""

from __future__ import annotations

import pytest
import torch

from pagoda.ops import OPS
from pagoda.testing import DTYPES, ProviderEntry, check_kernel_provider, dtype_name
from pagoda.testing import kernel_providers as registered
from pagoda_template.plugin import OPS as TEMPLATE_OPS

PROVIDERS = registered("template")


def test_registered_providers() -> None:
    found = {(e.op, e.plugin, e.provider.name) for e in PROVIDERS}
    expected = ({(op, "template", "template") for op in TEMPLATE_OPS}
                | {(op, "core", "reference") for op, spec in OPS.items() if not spec.optional})
    assert found == expected
    assert set(TEMPLATE_OPS) <= set(OPS)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("entry", PROVIDERS, ids=lambda e: e.id)
def test_provider_matches_reference(entry: ProviderEntry, dtype: torch.dtype) -> None:
    report = check_kernel_provider(entry.provider, dtype, plugin=entry.plugin, seed=21)
    report.raise_for_failures()
    assert report.checked and not report.skipped
