"""One line of an OpenAI batch input file."""

from __future__ import annotations

from typing import Any, Literal

from pagoda_server.protocol.common import RequestModel

BATCH_URLS = ("/v1/chat/completions", "/v1/completions")


class BatchLine(RequestModel):
    custom_id: str
    method: Literal["POST"]
    url: Literal["/v1/chat/completions", "/v1/completions"]
    body: dict[str, Any]
