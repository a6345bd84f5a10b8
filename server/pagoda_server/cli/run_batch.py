"""`pagoda run-batch -i requests.jsonl -o results.jsonl`: an OpenAI batch file, offline.

Each line goes through the server's own handlers in-process (no socket), so a batch
line is validated and answered exactly as the HTTP API would; lines run concurrently
and the engine batches them.

Nothing is lost: each result is appended to the output file as it completes (in the
order requests finish, as OpenAI's batches do), one whole line at a time. Running the
same command again after a crash or Ctrl-C resumes: the requests whose `custom_id`
already has a result are skipped (a result of a server error, 5xx, is retried), and a
last line the earlier run did not finish writing is dropped first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import ValidationError
from tqdm.auto import tqdm

from pagoda.cli.dataclass_args import add_dataclass_arguments, dataclass_from_args
from pagoda.cli.engine_args import add_engine_arguments, engine_config
from pagoda_server import event_loop
from pagoda_server.config import ChatFormatConfig, chat_format_config
from pagoda_server.protocol.batch import BatchLine

if TYPE_CHECKING:
    from pagoda.config import EngineConfig


@dataclass
class RunBatchConfig:
    """The batch: where its requests come from and where their results go."""

    input_file: str = field(metadata={"short": "-i"})
    """OpenAI batch input (JSONL): one request a line."""
    output_file: str = field(metadata={"short": "-o"})
    """Where to write the results (JSONL)."""
    max_concurrency: int | None = None
    """Requests in flight at once; None: max_num_seqs."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_engine_arguments(parser)
    add_dataclass_arguments(parser, RunBatchConfig)
    add_dataclass_arguments(parser, ChatFormatConfig)


def _result(custom_id: str | None, response: dict[str, Any] | None = None,
            error: dict[str, str] | None = None) -> dict[str, Any]:
    return {"id": f"batch_req_{uuid.uuid4().hex}", "custom_id": custom_id,
            "response": response, "error": error}


async def _execute(client: httpx.AsyncClient, number: int, text: str) -> dict[str, Any]:
    try:
        raw = json.loads(text)
    except ValueError as exc:
        return _result(None, error={"code": "invalid_json",
                                    "message": f"line {number}: {exc}"})
    custom_id = raw.get("custom_id") if isinstance(raw, dict) else None
    try:
        line = BatchLine.model_validate(raw)
    except ValidationError as exc:
        from pagoda_server.errors import validation_error  # imports the engine (torch)

        message = validation_error(list(exc.errors())).message
        return _result(custom_id, error={"code": "invalid_request",
                                         "message": f"line {number}: {message}"})
    if line.body.get("stream"):
        return _result(line.custom_id, error={"code": "invalid_request", "message":
                                              f"line {number}: a batch cannot stream"})
    response = await client.post(line.url, json=line.body)
    return _result(line.custom_id, {"status_code": response.status_code,
                                    "request_id": f"req_{uuid.uuid4().hex}",
                                    "body": response.json()})


def _custom_id(text: str) -> str | None:
    try:
        raw = json.loads(text)
    except ValueError:
        return None
    custom_id = raw.get("custom_id") if isinstance(raw, dict) else None
    return custom_id if isinstance(custom_id, str) else None


def _is_final(result: object) -> bool:
    """Whether a result stands (anything but a server error, which a re-run retries)."""
    if not isinstance(result, dict) or not isinstance(result.get("custom_id"), str):
        return False
    response = result.get("response")
    return not (isinstance(response, dict) and response.get("status_code", 0) >= 500)


def _keep_finished(output_file: str) -> set[str]:
    """The custom_ids that an earlier run of the batch answered for good in `output_file`,
    which is rewritten (atomically) to hold only those results."""
    try:
        with open(output_file, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return set()
    kept, done = [], set()
    for line in data[: data.rfind(b"\n") + 1].splitlines():  # (a cut last line is dropped)
        try:
            result = json.loads(line)
        except ValueError:
            continue
        if _is_final(result) and result["custom_id"] not in done:
            kept.append(line + b"\n")
            done.add(result["custom_id"])
    partial = f"{output_file}.partial"
    with open(partial, "wb") as f:
        f.writelines(kept)
    os.replace(partial, output_file)
    return done


async def _run(config: EngineConfig, batch: RunBatchConfig, chat: ChatFormatConfig,
               lines: list[tuple[int, str]],
               record: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    # The engine and the app load torch: only when running, not for --help.
    from pagoda.frontend.async_llm import AsyncLLM
    from pagoda_server.app import build_app

    engine = AsyncLLM(config)
    try:
        app = build_app(engine, api_keys=[], chat_format_config=chat)
        limit = asyncio.Semaphore(batch.max_concurrency or config.scheduler.max_num_seqs)
        bar = tqdm(total=len(lines), desc="Running batch", unit="req")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://pagoda",
                                     timeout=None) as client:
            async def one(number: int, text: str) -> dict[str, Any]:
                async with limit:
                    result = await _execute(client, number, text)
                record(result)
                bar.update(1)
                return result

            with bar:
                return list(await asyncio.gather(*(one(n, t) for n, t in lines)))
    finally:
        engine.shutdown()


def run(args: argparse.Namespace) -> int:
    config, batch = engine_config(args), dataclass_from_args(RunBatchConfig, args)
    chat = chat_format_config(args)
    try:
        with open(batch.input_file) as f:
            lines = [(n, t) for n, t in enumerate(f, start=1) if t.strip()]
    except OSError as exc:
        raise SystemExit(f"pagoda run-batch: error: cannot read --input-file: {exc}") from None
    ids = [i for _, t in lines if (i := _custom_id(t)) is not None]
    if len(set(ids)) < len(ids):
        twice = sorted({i for i in ids if ids.count(i) > 1})[:5]
        raise SystemExit(f"pagoda run-batch: error: --input-file: custom_id must be unique; "
                         f"repeated: {', '.join(map(repr, twice))}")
    try:
        done = _keep_finished(batch.output_file)
    except OSError as exc:
        raise SystemExit(f"pagoda run-batch: error: --output-file: {exc}") from None
    todo = [(n, t) for n, t in lines if _custom_id(t) not in done]
    if done:
        print(f"Resuming: {len(lines) - len(todo)} of {len(lines)} requests already have "
              f"results in {batch.output_file}")
    with open(batch.output_file, "a", encoding="utf-8") as out:
        def record(result: dict[str, Any]) -> None:
            out.write(json.dumps(result, ensure_ascii=False) + "\n")  # one whole line
            out.flush()

        try:
            results = event_loop.run(_run(config, batch, chat, todo, record))
        except KeyboardInterrupt:
            print(f"Interrupted; the results so far are in {batch.output_file}: run the same "
                  f"command again to resume")
            return 130
    failed = sum(1 for r in results if r["error"] or r["response"]["status_code"] != 200)
    print(f"{len(results) - failed} of {len(results)} requests succeeded; "
          f"results in {batch.output_file}")
    return 0
