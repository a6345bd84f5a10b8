"""The FastAPI application: routes, error handling and API keys around one engine."""

from __future__ import annotations

from fastapi import FastAPI

import pagoda_server
from pagoda.frontend.async_llm import AsyncLLM
from pagoda_server.auth import APIKeyMiddleware
from pagoda_server.body_limit import BodyLimitMiddleware
from pagoda_server.config import DEFAULT_MAX_REQUEST_BODY_BYTES, ChatFormatConfig
from pagoda_server.conversation import ChatFormat
from pagoda_server.errors import install_error_handlers
from pagoda_server.handlers import (
    anthropic,
    chat,
    completions,
    embeddings,
    lora,
    scoring,
    service,
    tokens,
)
from pagoda_server.metrics import ServerMetrics
from pagoda_server.state import ServerState


def build_app(engine: AsyncLLM, api_keys: list[str],
              chat_format_config: ChatFormatConfig | None = None, *,
              max_request_body_bytes: int = DEFAULT_MAX_REQUEST_BODY_BYTES,
              request_timeout: float | None = None) -> FastAPI:
    """The app serving `engine` under its served model names; with `api_keys`, every
    non-public route needs one of them. `chat_format_config`: the model's tool-call and reasoning
    formats (ValueError naming the option for an unknown one). Larger request bodies than
    `max_request_body_bytes` answer 413; requests running longer than `request_timeout`
    seconds are aborted and answer 504."""
    app = FastAPI(title="Pagoda", version=pagoda_server.__version__)
    chat_format = ChatFormat(engine.tokenizer, chat_format_config or ChatFormatConfig())
    app.state.pagoda = ServerState(engine, ServerMetrics(engine), chat_format,
                                   request_timeout=request_timeout)
    install_error_handlers(app)
    app.add_middleware(BodyLimitMiddleware, limit=max_request_body_bytes)
    app.add_middleware(APIKeyMiddleware, keys=api_keys)  # (the outer one: keys first)
    for module in (completions, chat, anthropic, embeddings, scoring, tokens, service, lora):
        app.include_router(module.router)
    return app
