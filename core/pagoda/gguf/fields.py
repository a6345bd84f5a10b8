"""Typed access to a GGUF file's key/value metadata."""

from __future__ import annotations

from typing import Any

import numpy as np
from gguf import GGUFReader, GGUFValueType

_REQUIRED: Any = object()


class GGUFMetadata:
    """The key/value section of one GGUF file, with plain Python values."""

    def __init__(self, reader: GGUFReader) -> None:
        self._fields = reader.fields

    def __contains__(self, key: str) -> bool:
        return key in self._fields

    def get(self, key: str, default: Any = None) -> Any:
        """The value stored under `key`, or `default` when the file lacks it.

        FLOAT32 values come back as the shortest decimal that round-trips in
        float32 (1e-05, not 9.999999747378752e-06), which is what the source
        checkpoint's config held.
        """
        field = self._fields.get(key)
        if field is None:
            return default
        value = field.contents()
        if field.types == [GGUFValueType.FLOAT32]:
            return float(str(np.float32(value)))
        return value

    @property
    def architecture(self) -> str:
        return str(self.get("general.architecture", ""))

    def arch_get(self, suffix: str, default: Any = _REQUIRED) -> Any:
        """The value of `{architecture}.{suffix}`, e.g. `llama.block_count`.

        Without a default, a missing key is a ValueError naming it.
        """
        key = f"{self.architecture}.{suffix}"
        value = self.get(key, default)
        if value is _REQUIRED:
            raise ValueError(f"GGUF file lacks the metadata key {key!r}")
        return value
