"""The request body limit: a body larger than `max_request_body_bytes` answers 413 before
any of it is parsed, whether its size is declared (Content-Length) or streamed in chunks."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pagoda_server.errors import APIError, error_response


class BodyLimitMiddleware:
    """Reads each request's body (at most `limit` bytes of it) before the app sees it."""

    def __init__(self, app: ASGIApp, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(scope, receive, send, int(declared))
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                await self.app(scope, _replay([], message), send)
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                await self._refuse(scope, receive, send, None)
                return
            if not message.get("more_body", False):
                break
        body = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        await self.app(scope, _replay([body], None, receive), send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send,
                      declared: int | None) -> None:
        size = f"{declared} bytes" if declared is not None else "more"
        error = APIError(413, f"the request body is {size}; this server accepts at most "
                              f"{self.limit} bytes (--max-request-body-bytes)",
                         code="request_too_large")
        await error_response(error, scope["path"])(scope, receive, send)


def _replay(messages: list[Message], last: Message | None,
            then: Receive | None = None) -> Receive:
    """A receive() that gives `messages`, then `last` (if any), then defers to `then`."""
    pending = list(messages) + ([last] if last is not None else [])

    async def receive() -> Message:
        if pending:
            return pending.pop(0)
        if then is not None:
            return await then()
        return {"type": "http.disconnect"}

    return receive
