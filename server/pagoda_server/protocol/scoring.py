"""POST /score and /rerank request bodies (vLLM's; rerank as Jina's and Cohere's)."""

from __future__ import annotations

from pydantic import Field

from pagoda_server.protocol.common import RequestModel


class ScoreRequest(RequestModel):
    """One text_1 against each text_2, or text_1[i] against text_2[i]."""

    model: str | None = None
    text_1: str | list[str]
    text_2: str | list[str]


class RerankRequest(RequestModel):
    """The documents ordered by their relevance to the query, best first."""

    model: str | None = None
    query: str
    documents: list[str] = Field(min_length=1)
    top_n: int | None = Field(None, ge=1)
    """Only the `top_n` best; None: all."""
    return_documents: bool = True
    """Whether each result carries its document's text."""
