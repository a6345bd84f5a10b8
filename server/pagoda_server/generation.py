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

from pagoda.engine.async_llm import EngineDeadError
from pagoda.engine.input_processor import PromptInput
from pagoda.outputs import RequestOutput
from pagoda.sampling_params import SamplingParams
from pagoda_server.errors import (
    APIError,
    ClientDisconnected,
    bad_request,
    engine_dead,
    error_param,
)
from pagoda_server.params import PARAM_NAMES
from pagoda_server.state import ServerState

T = TypeVar("T")
Outputs = AsyncGenerator[RequestOutput, None]


async def _wait_for_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _next(items: AsyncGenerator[T, None]) -> T:
    return await items.__anext__()


async def _until_disconnect(request: Request,
                            items: AsyncGenerator[T, None]) -> AsyncGenerator[T, None]:
    """`items` until they end, or until the client disconnects (ClientDisconnected)."""
    disconnect = asyncio.ensure_future(_wait_for_disconnect(request))
    try:
        async with aclosing(items):
            while True:
                step = asyncio.ensure_future(_next(items))
                try:
                    await asyncio.wait({step, disconnect}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if not step.done():
                        step.cancel()
                        await asyncio.gather(step, return_exceptions=True)
                if step.cancelled():
                    raise ClientDisconnected
                try:
                    item = step.result()
                except StopAsyncIteration:
                    return
                yield item
    finally:
        disconnect.cancel()


async def _prepend(first: T, rest: AsyncGenerator[T, None]) -> AsyncGenerator[T, None]:
    async with aclosing(rest):
        yield first
        async for item in rest:
            yield item


async def _start(state: ServerState, request: Request, prompt: PromptInput,
                 params: SamplingParams, request_id: str, priority: int) -> Outputs:
    outputs = _until_disconnect(
        request, state.metrics.track(state.engine.generate(prompt, params, request_id, priority)))
    try:
        first = await outputs.__anext__()
    except (ValueError, TypeError) as exc:
        raise bad_request(str(exc), error_param(str(exc), PARAM_NAMES)) from None
    except EngineDeadError as exc:
        raise engine_dead(exc) from None
    except StopAsyncIteration:
        raise APIError(500, "the engine ended the request without output") from None
    return _prepend(first, outputs)


async def start_generations(state: ServerState, request: Request, prompts: list[PromptInput],
                            params: SamplingParams, request_id: str,
                            priority: int = 0) -> list[Outputs]:
    """Submit every prompt at once (ids `request_id-i` when several) and return their
    outputs once each has its first; if any fails, the others are aborted."""
    started = await asyncio.gather(*(
        _start(state, request, prompt, params.clone(),
               request_id if len(prompts) == 1 else f"{request_id}-{i}", priority)
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
    pending = {asyncio.ensure_future(_next(s)): i for i, s in enumerate(streams)}
    try:
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                index = pending.pop(task)
                try:
                    item = task.result()
                except StopAsyncIteration:
                    continue
                pending[asyncio.ensure_future(_next(streams[index]))] = index
                yield index, item
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
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
