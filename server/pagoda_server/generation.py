"""One request's trip through the engine, as handlers see it.

`start_generations` waits for each prompt's first output, so invalid input or a dead
engine fails with an HTTP error before any response starts. The outputs that follow
stop, and the request is aborted (freeing its KV blocks), once the client disconnects.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import TypeVar

from fastapi import Request

from pagoda.frontend.async_llm import (
    AsyncLLM,
    EngineDeadError,
    EngineOverloadedError,
    RequestTimeoutError,
)
from pagoda.inputs import PromptInput
from pagoda.lora.request import LoRARequest
from pagoda.outputs import RequestOutput
from pagoda.sampling_params import SamplingParams
from pagoda_server.errors import (
    APIError,
    ClientDisconnected,
    as_api_error,
    bad_request,
    error_param,
)
from pagoda_server.params import PARAM_NAMES
from pagoda_server.state import ServerState

T = TypeVar("T")
Outputs = AsyncGenerator[RequestOutput, None]


async def _watch(request: Request, engine: AsyncLLM, request_id: str) -> None:
    """Abort the request in the engine (freeing its blocks) once its client disconnects;
    the consumer then gets the request's last output at once."""
    try:
        while (await request.receive())["type"] != "http.disconnect":
            pass
    except Exception:  # the connection broke some other way: the client is gone all the same
        pass
    await engine.abort(request_id)


async def _outputs(first: RequestOutput, rest: Outputs, watcher: asyncio.Task[None]) -> Outputs:
    """`first`, then the rest; ClientDisconnected once the watcher has seen the client go.

    Costs nothing per output: the watcher is one task for the request's life, and the
    abort it makes on a disconnect ends `rest` with a last output."""
    try:
        async with aclosing(rest):
            yield first
            async for item in rest:
                if watcher.done():
                    raise ClientDisconnected
                yield item
    finally:
        watcher.cancel()


async def _first(outputs: Outputs) -> RequestOutput:
    """A request's first output; bad input, a dead engine and a time limit reached
    become HTTP errors."""
    try:
        return await outputs.__anext__()
    except (ValueError, TypeError) as exc:
        raise bad_request(str(exc), error_param(str(exc), PARAM_NAMES)) from None
    except (EngineDeadError, EngineOverloadedError, RequestTimeoutError) as exc:
        raise as_api_error(exc) from None
    except StopAsyncIteration:
        raise APIError(500, "the engine ended the request without output") from None


async def _start(state: ServerState, request: Request, prompt: PromptInput,
                 params: SamplingParams, request_id: str, priority: int,
                 lora: LoRARequest | None) -> Outputs:
    outputs = state.metrics.track(state.engine.generate(prompt, params, request_id, priority,
                                                        lora, state.request_timeout))
    watcher = asyncio.ensure_future(_watch(request, state.engine, request_id))
    try:
        first = await _first(outputs)
    except BaseException:
        watcher.cancel()
        raise
    if watcher.done():  # the client left before the first output
        await outputs.aclose()
        raise ClientDisconnected
    return _outputs(first, outputs, watcher)


async def start_generations(state: ServerState, request: Request, prompts: list[PromptInput],
                            params: SamplingParams, request_id: str,
                            priority: int = 0, model: str | None = None) -> list[Outputs]:
    """Submit every prompt at once (ids `request_id-i` when several) and return their
    outputs once each has its first; if any fails, the others are aborted. `model`: the
    served name asked for (a LoRA adapter's runs the prompts with it)."""
    lora = None if model is None else state.lora_request(model)
    started = await asyncio.gather(*(
        _start(state, request, prompt, params.clone(),
               request_id if len(prompts) == 1 else f"{request_id}-{i}", priority, lora)
        for i, prompt in enumerate(prompts)
    ), return_exceptions=True)
    streams = [s for s in started if not isinstance(s, BaseException)]
    if len(streams) < len(started):
        for stream in streams:
            await stream.aclose()
        raise next(s for s in started if isinstance(s, BaseException))
    return streams


async def merge(streams: list[AsyncGenerator[T, None]]) -> AsyncGenerator[tuple[int, T], None]:
    """Items of several streams as they come, each with its stream's index."""
    if len(streams) == 1:  # the common case: no tasks, no queue
        async with aclosing(streams[0]) as only:
            async for item in only:
                yield 0, item
        return
    queue: asyncio.Queue[tuple[int, T] | BaseException | None] = asyncio.Queue()

    async def pump(index: int, stream: AsyncGenerator[T, None]) -> None:
        try:
            async for item in stream:
                queue.put_nowait((index, item))
        except Exception as exc:
            queue.put_nowait(exc)
        queue.put_nowait(None)  # this stream has ended

    pumps = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    try:
        running = len(pumps)
        while running:
            entry = await queue.get()
            if entry is None:
                running -= 1
            elif isinstance(entry, BaseException):
                raise entry
            else:
                yield entry
    finally:
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        for stream in streams:
            await stream.aclose()


async def final_outputs(streams: list[Outputs]) -> list[RequestOutput]:
    """Drain the streams; the last output of each, in order."""
    finals: dict[int, RequestOutput] = {}
    async with aclosing(merge(streams)) as items:
        async for index, output in items:
            finals[index] = output
    if len(finals) < len(streams) or not all(f.finished for f in finals.values()):
        raise APIError(500, "the engine ended a request without a final output")
    return [finals[i] for i in range(len(streams))]
