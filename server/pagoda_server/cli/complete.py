"""`pagoda complete [PROMPT]`: stream a completion from a running server."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import httpx

from pagoda.cli.dataclass_args import add_dataclass_arguments, dataclass_from_args
from pagoda_server.cli.client import ClientConfig, ServerError, connect


@dataclass
class CompleteConfig:
    """The completion."""

    prompt: str | None = None
    """The prompt; None: read from stdin."""
    max_tokens: int = 128
    """Most tokens to generate."""
    temperature: float | None = None
    """Sampling temperature; None: the model's default."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_dataclass_arguments(parser, CompleteConfig, positional=("prompt",))
    add_dataclass_arguments(parser, ClientConfig)


def run(args: argparse.Namespace) -> int:
    complete = dataclass_from_args(CompleteConfig, args)
    prompt = complete.prompt if complete.prompt is not None else sys.stdin.read()
    client, model = connect(dataclass_from_args(ClientConfig, args))
    body = {"model": model, "prompt": prompt, "max_tokens": complete.max_tokens}
    if complete.temperature is not None:
        body["temperature"] = complete.temperature
    try:
        for chunk in client.stream("/v1/completions", body):
            for choice in chunk["choices"]:
                print(choice["text"], end="", flush=True)
    except (ServerError, httpx.HTTPError) as exc:
        print(f"\nerror: {exc}", file=sys.stderr)
        return 1
    print()
    return 0
