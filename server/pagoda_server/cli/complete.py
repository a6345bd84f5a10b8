"""`pagoda complete [PROMPT]`: stream a completion from a running server."""

from __future__ import annotations

import argparse
import sys

import httpx

from pagoda_server.cli.client import ServerError, add_client_arguments, connect


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("prompt", nargs="?", default=None, help="the prompt (default: stdin)")
    add_client_arguments(parser)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=None)


def run(args: argparse.Namespace) -> int:
    prompt = args.prompt if args.prompt is not None else sys.stdin.read()
    client, model = connect(args)
    body = {"model": model, "prompt": prompt, "max_tokens": args.max_tokens}
    if args.temperature is not None:
        body["temperature"] = args.temperature
    try:
        for chunk in client.stream("/v1/completions", body):
            for choice in chunk["choices"]:
                print(choice["text"], end="", flush=True)
    except (ServerError, httpx.HTTPError) as exc:
        print(f"\nerror: {exc}", file=sys.stderr)
        return 1
    print()
    return 0
