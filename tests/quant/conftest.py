"""Fixtures for the quantization tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as T  # noqa: E402

from tests.quant.tiny_gguf import write_tiny_llama  # noqa: E402

WriteTiny = Callable[[Callable[[str], T]], Path]


@pytest.fixture
def write_tiny(tmp_path: Path) -> WriteTiny:
    """write_tiny(type_of) -> path of the tiny Llama GGUF (see `write_tiny_llama`)."""
    return lambda type_of: write_tiny_llama(tmp_path / "tiny.gguf", type_of)
