"""`pagoda chat`: an interactive, streaming chat with a running server."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import httpx

from pagoda_server.cli.client import ServerClient, ServerError, add_client_arguments, connect

HELP = "Type a message; /reset starts over, /exit (or Ctrl-D) quits, Ctrl-C stops an answer."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_client_arguments(parser)
    parser.add_argument("--system", default=None, help="system prompt")
    parser.add_argument("--max-tokens", type=int, default=None)
    parser.add_argument("--temperature", type=float, default=None)


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
    client, model = connect(args)
    start = [{"role": "system", "content": args.system}] if args.system else []
    messages = list(start)
    options = {k: v for k, v in (("max_tokens", args.max_tokens),
                                 ("temperature", args.temperature)) if v is not None}
    print(f"Chatting with {model} at {args.url}. {HELP}", flush=True)
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
