"""Core test fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pagoda.plugins import reset_registries


@pytest.fixture
def fresh_registries(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Discover plugins anew in this process (after env changes), and again after."""
    for name in ("PAGODA_PLUGINS", "PAGODA_DEVICE"):
        monkeypatch.delenv(name, raising=False)
    reset_registries()
    yield
    reset_registries()
