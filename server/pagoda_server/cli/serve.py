"""`pagoda serve [MODEL]`: the OpenAI- and Anthropic-compatible HTTP server."""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import os
from typing import TYPE_CHECKING

from pagoda.cli.engine_args import add_engine_arguments
from pagoda.plugins import get_registries
from pagoda_server import __version__, event_loop

if TYPE_CHECKING:  # the engine and the app load torch: only when serving, not for --help
    from pagoda.frontend.async_llm import AsyncLLM
    from pagoda_server.state import ServerConfig

API_KEY_ENV = "PAGODA_API_KEY"
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_engine_arguments(parser)
    g = parser.add_argument_group("server")
    g.add_argument("--host", default="localhost", help="address to listen on")
    g.add_argument("--port", type=int, default=8000)
    g.add_argument("--api-key", action="append", default=[],
                   help=f"require this API key (repeatable; also {API_KEY_ENV}, "
                        "comma-separated)")
    g.add_argument("--served-model-name", action="append", default=[],
                   help="a name clients use for the model (repeatable; the first is "
                        "reported; default: the model's name)")
    g.add_argument("--log-level", default="info", choices=LOG_LEVELS)


def api_keys(args: argparse.Namespace) -> list[str]:
    from_env = os.environ.get(API_KEY_ENV, "").split(",")
    return [k.strip() for k in [*args.api_key, *from_env] if k.strip()]


def _plugin_of(platform: str) -> str:
    regs = get_registries()
    record = regs.record(regs.probes.get(platform).plugin)
    return f"{record.distribution} {record.version}"


def _print_banner(engine: AsyncLLM, config: ServerConfig, url: str) -> None:
    info = engine.info
    lines = [
        f"Pagoda server {__version__}",
        f"  model:      {engine.frontend.source.name} "
        f"(served as {', '.join(config.served_model_names)})",
        f"  plugin:     {_plugin_of(info['platform'])}",
        f"  device:     {info['platform']} ({info.get('device', '?')})",
        f"  attention:  {info['attention_backend']}, dtype {info.get('dtype', '?')}",
        f"  KV cache:   {info['kv_cache_tokens']} tokens; max_model_len {engine.max_model_len}",
        f"  API keys:   {'required' if config.api_keys else 'none'}",
        f"  listening:  {url}",
    ]
    print("\n".join(lines), flush=True)


def _url(host: str, port: int) -> str:
    if host in ("0.0.0.0", "::", ""):
        return f"http://localhost:{port} (all interfaces)"
    return f"http://{host}:{port}"


async def _serve(args: argparse.Namespace) -> None:
    import uvicorn

    from pagoda.frontend.async_llm import AsyncLLM
    from pagoda_server.app import build_app
    from pagoda_server.cli.engine_setup import engine_config
    from pagoda_server.state import ServerConfig

    names = args.served_model_name
    engine = AsyncLLM(engine_config(args, names[0] if names else None))
    try:
        config = ServerConfig(names or [engine.model_name], api_keys(args))
        app = build_app(engine, config)
        _print_banner(engine, config, _url(args.host, args.port))
        # What start-up made (tokenizer, app, imports) is never scanned again, and young
        # collections run every 50k allocations instead of 700: a thousand streams make
        # short-lived objects by the million, and the collector was a tenth of their cost.
        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 20, 10)
        server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port,
                                               log_level=args.log_level,
                                               timeout_graceful_shutdown=5))
        await server.serve()
    finally:
        engine.shutdown()


def run(args: argparse.Namespace) -> int:
    logging.getLogger().setLevel(args.log_level.upper())
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: uvicorn has shut down cleanly
        event_loop.run(_serve(args))
    return 0
