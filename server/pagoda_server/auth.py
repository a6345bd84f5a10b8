"""API keys: with keys configured, every route but the public ones needs one of them.

Clients send `Authorization: Bearer KEY` (OpenAI) or `x-api-key: KEY` (Anthropic).
Keys are compared in constant time, against all configured keys every time.
"""

from __future__ import annotations

import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from pagoda_server.errors import APIError, error_response

PUBLIC_PATHS = frozenset({"/health", "/version", "/metrics"})


def key_matches(given: str, keys: list[str]) -> bool:
    matched = False
    for key in keys:
        matched |= hmac.compare_digest(given.encode(), key.encode())
    return matched


def presented_key(headers: dict[str, str]) -> str | None:
    auth = headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() == "bearer" and token:
        return token.strip()
    return headers.get("x-api-key")


class APIKeyMiddleware:
    """Answers 401 to requests without a valid key (a no-op without keys)."""

    def __init__(self, app: ASGIApp, keys: list[str]):
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.keys or scope["path"] in PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope["headers"]}
        given = presented_key(headers)
        if given is not None and key_matches(given, self.keys):
            await self.app(scope, receive, send)
            return
        message = ("invalid API key" if given is not None else
                   "missing API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'")
        response = error_response(APIError(401, message, code="invalid_api_key"), scope["path"])
        await response(scope, receive, send)
