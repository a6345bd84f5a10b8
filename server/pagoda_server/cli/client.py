"""A small HTTP client for the commands that talk to a running server."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator
from typing import Any

import httpx

API_KEY_ENV = "PAGODA_API_KEY"
DEFAULT_URL = "http://localhost:8000"


class ServerError(RuntimeError):
    """The server answered with an error; the message is the server's."""


def add_client_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default=DEFAULT_URL, help=f"server URL (default {DEFAULT_URL})")
    parser.add_argument("--api-key", default=None,
                        help=f"API key (default: the first of {API_KEY_ENV})")
    parser.add_argument("--model", default=None, help="model name (default: the server's)")


def api_key(given: str | None) -> str | None:
    if given:
        return given
    keys = [k.strip() for k in os.environ.get(API_KEY_ENV, "").split(",") if k.strip()]
    return keys[0] if keys else None


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


def connect(args: argparse.Namespace) -> tuple[ServerClient, str]:
    """A client for `--url` and the model to ask for; exits with a message if unreachable."""
    client = ServerClient(args.url, api_key(args.api_key))
    try:
        return client, client.model(args.model)
    except httpx.HTTPError as exc:
        raise SystemExit(f"cannot reach the server at {args.url}: {exc}") from None
    except ServerError as exc:
        raise SystemExit(f"the server at {args.url} refused: {exc}") from None
