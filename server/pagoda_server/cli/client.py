"""A small HTTP client for the commands that talk to a running server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from pagoda_server.config import env_api_keys


@dataclass
class ClientConfig:
    """The server to talk to."""

    url: str = "http://localhost:8000"
    """The server's URL."""
    api_key: str | None = None
    """API key; None: the first of PAGODA_API_KEY."""
    model: str | None = None
    """Model name; None: the first the server serves."""

    def key(self) -> str | None:
        """`api_key`, or the first of PAGODA_API_KEY."""
        if self.api_key:
            return self.api_key
        keys = env_api_keys()
        return keys[0] if keys else None


class ServerError(RuntimeError):
    """The server answered with an error; the message is the server's."""


def auth_headers(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def sse_payload(line: str) -> dict[str, Any] | None:
    """The JSON of a `data:` line; None for other lines and for `[DONE]`. An error
    payload raises ServerError."""
    if not line.startswith("data:"):
        return None
    data = line[5:].strip()
    if data == "[DONE]":
        return None
    payload = json.loads(data)
    if "error" in payload:
        raise ServerError(payload["error"].get("message", str(payload["error"])))
    return payload


def error_message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}: {response.text[:200]}"


class ServerClient:
    def __init__(self, url: str, key: str | None):
        self.http = httpx.Client(base_url=url, headers=auth_headers(key),
                                 timeout=httpx.Timeout(600.0, connect=10.0))

    def model(self, requested: str | None) -> str:
        """`requested`, or the first model the server lists."""
        if requested:
            return requested
        response = self.http.get("/v1/models")
        if response.status_code != 200:
            raise ServerError(error_message(response))
        return str(response.json()["data"][0]["id"])

    def stream(self, path: str, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """POST `body` with `stream: true`; each chunk's JSON."""
        with self.http.stream("POST", path, json={**body, "stream": True}) as response:
            if response.status_code != 200:
                response.read()
                raise ServerError(error_message(response))
            for line in response.iter_lines():
                payload = sse_payload(line)
                if payload is not None:
                    yield payload


def connect(config: ClientConfig) -> tuple[ServerClient, str]:
    """A client for the server and the model to ask for; exits with a message if
    unreachable."""
    client = ServerClient(config.url, config.key())
    try:
        return client, client.model(config.model)
    except httpx.HTTPError as exc:
        raise SystemExit(f"cannot reach the server at {config.url}: {exc}") from None
    except ServerError as exc:
        raise SystemExit(f"the server at {config.url} refused: {exc}") from None
