"""Server-sent events: frames, and a stream that ends cleanly whatever happens."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

from fastapi.responses import StreamingResponse

from pagoda_server.errors import APIError, ClientDisconnected, as_api_error

logger = logging.getLogger(__name__)

DONE = "data: [DONE]\n\n"


def _json(payload: dict[str, Any]) -> str:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def data_frame(payload: dict[str, Any]) -> str:
    return f"data: {_json(payload)}\n\n"


def event_frame(event: str, payload: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {_json(payload)}\n\n"


async def _guarded(frames: AsyncIterator[str],
                   error_frame: Callable[[APIError], str]) -> AsyncIterator[str]:
    """`frames`; a failure part-way becomes one error frame that ends the stream."""
    try:
        async with aclosing(frames):  # type: ignore[type-var]
            async for frame in frames:
                yield frame
    except ClientDisconnected:
        return
    except Exception as exc:
        error = as_api_error(exc)
        if error.status == 500:
            logger.exception("a stream failed")
        yield error_frame(error)


def sse_response(frames: AsyncIterator[str],
                 error_frame: Callable[[APIError], str]) -> StreamingResponse:
    return StreamingResponse(_guarded(frames, error_frame), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def openai_error_frame(error: APIError) -> str:
    return data_frame(error.openai_body())


def anthropic_error_frame(error: APIError) -> str:
    return event_frame("error", error.anthropic_body())
