"""POST /v1/embeddings request body (OpenAI's CreateEmbeddingRequest)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from pagoda_server.protocol.common import RequestModel

MAX_INPUTS = 2048
"""Inputs of one request at most, as OpenAI allows."""

Prompt = str | list[int]


class EmbeddingRequest(RequestModel):
    model: str | None = None
    """Optional here: the served model when left out."""
    input: (str | list[str] | list[int] | list[list[int]])
    encoding_format: Literal["float", "base64"] = "float"
    """base64: each embedding's little-endian float32 bytes, base64-encoded."""
    dimensions: int | None = Field(None, ge=1)
    """Matryoshka models only: keep the embedding's first `dimensions` values."""
    user: str | None = None
    """Accepted, unused."""

    @field_validator("input")
    @classmethod
    def _check_input(cls, value: str | list[Any]) -> str | list[Any]:
        if isinstance(value, list) and not 1 <= len(value) <= MAX_INPUTS:
            raise ValueError(f"input must hold 1 to {MAX_INPUTS} entries, got {len(value)}")
        if value == "" or (isinstance(value, list) and any(v in ("", []) for v in value)):
            raise ValueError("input must not hold an empty text or token list")
        return value

    def inputs(self) -> list[Prompt]:
        """One entry per embedding: text or token ids."""
        value = self.input
        if isinstance(value, str) or isinstance(value[0], int):
            return [value]  # type: ignore[list-item]
        return list(value)  # type: ignore[arg-type]
