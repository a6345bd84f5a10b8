"""`pagoda serve [MODEL]`: the OpenAI- and Anthropic-compatible HTTP server."""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import signal
from typing import TYPE_CHECKING

from pagoda.cli.dataclass_args import add_dataclass_arguments, dataclass_from_args
from pagoda.cli.engine_args import add_engine_arguments, engine_config
from pagoda.plugins import get_registries
from pagoda_server import __version__, event_loop
from pagoda_server.config import ChatFormatConfig, ServerConfig, chat_format_config

if TYPE_CHECKING:  # the engine and the app load torch: only when serving, not for --help
    from pagoda.config import EngineConfig, ParallelConfig
    from pagoda.frontend.async_llm import AsyncLLM


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_engine_arguments(parser)
    add_dataclass_arguments(parser, ServerConfig)
    add_dataclass_arguments(parser, ChatFormatConfig)


def _plugin_of(platform: str) -> str:
    regs = get_registries()
    record = regs.record(regs.probes.get(platform).plugin)
    return f"{record.distribution} {record.version}"


def _print_banner(engine: AsyncLLM, api_keys: list[str], url: str, chat: str) -> None:
    info = engine.info
    lines = [
        f"Pagoda server {__version__}",
        f"  model:      {engine.frontend.source.name} "
        f"(served as {', '.join(engine.served_model_names)})",
        f"  plugin:     {_plugin_of(info['platform'])}",
        f"  device:     {info['platform']} ({info.get('device', '?')})",
        f"  attention:  {info['attention_backend']}, dtype {info.get('dtype', '?')}",
        f"  parallel:   {_layout(engine.config.parallel)}",
        f"  runner:     {_runner(engine)}",
        f"  KV cache:   {_kv_cache(engine)}; max_model_len {engine.max_model_len}",
        f"  tool calls: {chat}",
        f"  API keys:   {'required' if api_keys else 'none'}",
        f"  listening:  {url}",
    ]
    print("\n".join(lines), flush=True)


def _runner(engine: AsyncLLM) -> str:
    """e.g. "pooling (embeddings of 384 values: mean pooling, normalized)"."""
    pooler = engine.pooler
    if pooler is None:
        return "generate"
    if pooler.task == "score":
        return "pooling (relevance scores of text pairs: a cross-encoder)"
    return (f"pooling (embeddings of {pooler.size} values: {pooler.pooling} pooling"
            f"{', normalized' if pooler.normalize else ''})")


def _kv_cache(engine: AsyncLLM) -> str:
    info = engine.info
    if not info["kv_cache_layers"]:
        return "none (no layer caches keys and values)"
    per_core = " per engine core" if engine.config.parallel.data_parallel_size > 1 else ""
    return (f"{info['kv_cache_tokens']} tokens{per_core} ({info['kv_cache_blocks']} blocks, "
            f"{info.get('kv_cache_dtype', '?')})")


def _layout(parallel: ParallelConfig) -> str:
    """e.g. "2 engine cores x 4 devices (tensor 2 x pipeline 2)"."""
    cores = parallel.data_parallel_size
    devices = parallel.world_size
    text = (f"{cores} engine core{'s' * (cores > 1)} x {devices} device{'s' * (devices > 1)}")
    if devices > 1:
        text += (f" (tensor {parallel.tensor_parallel_size} x pipeline "
                 f"{parallel.pipeline_parallel_size})")
    return text


def _url(host: str, port: int) -> str:
    if host in ("0.0.0.0", "::", ""):
        return f"http://localhost:{port} (all interfaces)"
    return f"http://{host}:{port}"


async def _serve(config: EngineConfig, server: ServerConfig, chat: ChatFormatConfig) -> None:
    import uvicorn

    from pagoda.frontend.async_llm import AsyncLLM
    from pagoda_server.app import build_app
    from pagoda_server.errors import APIError

    engine = AsyncLLM(config, restart_engine=server.restart_engine)
    try:
        api_keys = server.accepted_api_keys()
        app = build_app(engine, api_keys, chat,
                        max_request_body_bytes=server.max_request_body_bytes,
                        request_timeout=server.request_timeout)
        for name, path in server.lora_adapters().items():
            try:
                await app.state.pagoda.add_lora(name, path)
            except (ValueError, APIError) as exc:
                raise SystemExit(f"pagoda serve: error: lora_modules: {exc}") from None
        _print_banner(engine, api_keys, _url(server.host, server.port),
                      app.state.pagoda.chat.describe())
        # What start-up made (tokenizer, app, imports) is never scanned again, and young
        # collections run every 50k allocations instead of 700: a thousand streams make
        # short-lived objects by the million, and the collector was a tenth of their cost.
        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 20, 10)
        await uvicorn.Server(uvicorn.Config(app, host=server.host, port=server.port,
                                            log_level=server.log_level,
                                            timeout_graceful_shutdown=server.shutdown_timeout
                                            )).serve()
    finally:
        engine.shutdown()


def run(args: argparse.Namespace) -> int:
    try:
        server = dataclass_from_args(ServerConfig, args)
    except ValueError as exc:  # a bad value of a server option: said before anything loads
        raise SystemExit(f"pagoda {args.command}: error: {exc}") from None
    chat = chat_format_config(args)
    config = engine_config(args)
    logging.getLogger().setLevel(server.log_level.upper())
    # uvicorn shuts down gracefully on SIGTERM and Ctrl-C, then raises the signal again
    # under the handler it found: for SIGTERM, this one, so that the exit is a clean 0.
    signal.signal(signal.SIGTERM, _exit_cleanly)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: uvicorn has shut down cleanly
        event_loop.run(_serve(config, server, chat))
    return 0


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)
