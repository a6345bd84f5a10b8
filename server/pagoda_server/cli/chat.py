"""`pagoda chat`: an interactive, streaming chat with a running server."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

import httpx

from pagoda.cli.dataclass_args import add_dataclass_arguments, dataclass_from_args
from pagoda_server.cli.client import ClientConfig, ServerClient, ServerError, connect

HELP = "Type a message; /reset starts over, /exit (or Ctrl-D) quits, Ctrl-C stops an answer."


@dataclass
class ChatConfig:
    """The conversation."""

    system: str | None = None
    """System prompt."""
    max_tokens: int | None = None
    """Most tokens per answer; None: the server's limit."""
    temperature: float | None = None
    """Sampling temperature; None: the model's default."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_dataclass_arguments(parser, ClientConfig)
    add_dataclass_arguments(parser, ChatConfig)


def _answer(client: ServerClient, body: dict[str, Any]) -> str:
    """Stream one answer to stdout; what was received (all of it unless interrupted)."""
    text = ""
    try:
        for chunk in client.stream("/v1/chat/completions", body):
            for choice in chunk["choices"]:
                delta = choice["delta"].get("content") or ""
                text += delta
                print(delta, end="", flush=True)
    except KeyboardInterrupt:
        print(" [stopped]", end="")
    print()
    return text


def run(args: argparse.Namespace) -> int:
    server, chat = dataclass_from_args(ClientConfig, args), dataclass_from_args(ChatConfig, args)
    client, model = connect(server)
    start = [{"role": "system", "content": chat.system}] if chat.system else []
    messages = list(start)
    options = {k: v for k, v in (("max_tokens", chat.max_tokens),
                                 ("temperature", chat.temperature)) if v is not None}
    print(f"Chatting with {model} at {server.url}. {HELP}", flush=True)
    while True:
        try:
            line = input("> ").strip()
        except (EOFError, KeyboardInterrupt):
            print()
            return 0
        if line in ("/exit", "/quit"):
            return 0
        if line == "/reset":
            messages = list(start)
            continue
        if not line:
            continue
        messages.append({"role": "user", "content": line})
        try:
            reply = _answer(client, {"model": model, "messages": messages, **options})
        except (ServerError, httpx.HTTPError) as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            messages.pop()
            continue
        messages.append({"role": "assistant", "content": reply})
