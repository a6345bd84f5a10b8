"""The options of `pagoda serve` beyond the engine's: where it listens, who may call it."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from typing import Literal

API_KEY_ENV = "PAGODA_API_KEY"


def env_api_keys() -> list[str]:
    """The comma-separated keys of PAGODA_API_KEY."""
    return [k.strip() for k in os.environ.get(API_KEY_ENV, "").split(",") if k.strip()]


DEFAULT_MAX_REQUEST_BODY_BYTES = 8 * 2**20
"""8 MiB: a prompt of the longest contexts served is well under 1 MiB of text."""


@dataclass
class ServerConfig:
    """The HTTP server."""

    host: str = "localhost"
    """Address to listen on (0.0.0.0: every interface)."""
    port: int = 8000
    """Port to listen on."""
    api_key: list[str] = field(default_factory=list)
    """API keys a request must present one of; PAGODA_API_KEY adds its comma-separated
    keys. None at all: no authentication."""
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    """The least severe log messages shown."""
    lora_modules: list[str] = field(default_factory=list)
    """LoRA adapters served from start-up, each name=path (a PEFT adapter directory);
    clients name one as the model. Needs --enable-lora."""
    max_request_body_bytes: int = DEFAULT_MAX_REQUEST_BODY_BYTES
    """The largest request body accepted, in bytes; larger ones answer 413 unread."""
    shutdown_timeout: float = 5.0
    """Seconds that SIGTERM (or Ctrl-C) leaves the requests in flight to finish, once
    the server stops accepting new ones; those still running then are aborted, and the
    server exits 0."""
    request_timeout: float | None = None
    """Seconds a generation (or embedding) request may take, from its arrival, waiting
    included; one still running then is aborted in the engine (its KV cache blocks freed)
    and answered 504 (`request_timeout`), or ends its stream with that error. None: no
    limit."""
    restart_engine: bool = False
    """When an engine core process dies, fail its requests in flight with a retryable 503
    (`engine_restarting`, Retry-After) and start a new core of the same config in its
    place; at most 3 restarts within 10 minutes, then the engine stays dead. Off: a dead
    core leaves the server answering 503 (`engine_dead`) until it is restarted."""

    def __post_init__(self) -> None:
        if self.max_request_body_bytes < 1:
            raise ValueError(f"max_request_body_bytes must be >= 1, got "
                             f"{self.max_request_body_bytes}")
        if self.shutdown_timeout < 0:
            raise ValueError(f"shutdown_timeout must be >= 0, got {self.shutdown_timeout}")
        if self.request_timeout is not None and not self.request_timeout > 0:
            raise ValueError(f"request_timeout must be > 0 (or unset: no limit), got "
                             f"{self.request_timeout}")

    def lora_adapters(self) -> dict[str, str]:
        """`lora_modules` as name -> path; ValueError for an entry that is not name=path."""
        adapters = {}
        for entry in self.lora_modules:
            name, sep, path = entry.partition("=")
            if not sep or not name.strip() or not path.strip():
                raise ValueError(f"lora_modules: {entry!r} is not name=path")
            adapters[name.strip()] = path.strip()
        return adapters

    def accepted_api_keys(self) -> list[str]:
        """`api_key` and those of PAGODA_API_KEY."""
        return [*(k.strip() for k in self.api_key if k.strip()), *env_api_keys()]


@dataclass
class ChatFormatConfig:
    """How chat requests and replies map to the model's own formats."""

    tool_call_parser: str = "auto"
    """The format the model calls tools in: hermes (Qwen, Hermes `<tool_call>`), llama3_json,
    mistral; auto: the one the chat template renders, else hermes, told to the model in a
    system prompt; none: tool calling off (requests with tools answer 400)."""
    reasoning_parser: str | None = None
    """The model thinks in tags before it answers: qwen3 or deepseek_r1 (`<think>`); the
    thinking goes to `reasoning_content` (OpenAI) or thinking blocks (Anthropic)."""

    def __post_init__(self) -> None:
        from pagoda.reasoning import REASONING_PARSERS
        from pagoda.tools.parsers import TOOL_PARSERS

        tool_parsers = ["auto", "none", *TOOL_PARSERS]
        if self.tool_call_parser not in tool_parsers:
            raise ValueError(f"tool_call_parser must be one of {', '.join(tool_parsers)}, "
                             f"got {self.tool_call_parser!r}")
        if self.reasoning_parser is not None and self.reasoning_parser not in REASONING_PARSERS:
            raise ValueError(f"reasoning_parser must be one of "
                             f"{', '.join(REASONING_PARSERS)}, got {self.reasoning_parser!r}")


def chat_format_config(args: argparse.Namespace) -> ChatFormatConfig:
    """The ChatFormatConfig of parsed options; an invalid one exits with the command's error."""
    from pagoda.cli.dataclass_args import dataclass_from_args

    try:
        return dataclass_from_args(ChatFormatConfig, args)
    except ValueError as exc:
        raise SystemExit(f"pagoda {args.command}: error: {exc}") from None
