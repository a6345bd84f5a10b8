"""Pooling requests' trip through the engine, as the embeddings and scoring handlers see
it: every prompt submitted at once, all aborted if one fails or the client leaves; and
what the served model computes (a generating model or the wrong kind answers 400)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from fastapi import Request

from pagoda.frontend.async_llm import (
    EngineDeadError,
    EngineOverloadedError,
    RequestTimeoutError,
)
from pagoda.frontend.input_processor import ProcessedPrompt
from pagoda.inputs import PromptInput
from pagoda.outputs import PoolingRequestOutput
from pagoda.pooling import PoolerSpec, cosine_similarity
from pagoda.pooling_params import PoolingParams, PoolingTask
from pagoda_server.errors import APIError, ClientDisconnected, as_api_error, bad_request
from pagoda_server.state import ServerState

_WHAT = {"embed": "computes embeddings (/v1/embeddings)",
         "score": "scores text pairs (/v1/score, /v1/rerank)"}


def served_pooler(state: ServerState, wanted: PoolingTask | None = None) -> PoolerSpec:
    """What the served model outputs, as a pooling model (`wanted`: the task it must do);
    400 naming the model otherwise."""
    pooler = state.engine.pooler
    if pooler is None:
        raise APIError(400, f"the model {state.engine.model_name!r} generates text: it "
                            "computes no embeddings or scores (serve a pooling model, or "
                            "start the server with --runner pooling)", param="model")
    if wanted is not None and pooler.task != wanted:
        raise APIError(400, f"the model {state.engine.model_name!r} "
                            f"{_WHAT[pooler.task]}; it does not do that", param="model")
    return pooler


async def _disconnected(request: Request) -> None:
    try:
        while (await request.receive())["type"] != "http.disconnect":
            pass
    except Exception:  # the connection broke some other way: the client is gone all the same
        pass


async def encode_all(state: ServerState, request: Request,
                     prompts: Sequence[PromptInput | ProcessedPrompt], params: PoolingParams,
                     request_id: str, param: str) -> list[PoolingRequestOutput]:
    """Each prompt's output, in order (ids `request_id-i`). Bad input answers 400 (`param`
    names the field, or the option the message starts with); the client leaving aborts
    every request."""
    tasks = [asyncio.ensure_future(state.engine.encode(
        prompt, params, request_id if len(prompts) == 1 else f"{request_id}-{i}",
        timeout=state.request_timeout))
        for i, prompt in enumerate(prompts)]
    gathered = asyncio.gather(*tasks)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({gathered, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if gathered not in done:
            raise ClientDisconnected
        outputs = gathered.result()
    except (ValueError, TypeError) as exc:
        message = str(exc)
        raise bad_request(message, "dimensions" if message.startswith("dimensions")
                          else param) from None
    except (EngineDeadError, EngineOverloadedError, RequestTimeoutError) as exc:
        raise as_api_error(exc) from None
    finally:
        watcher.cancel()
        for task in tasks:
            task.cancel()  # those still running: aborted in the engine
        await asyncio.gather(gathered, watcher, return_exceptions=True)
    if any(o.data is None for o in outputs):
        raise APIError(500, "the engine aborted a request")
    return outputs


async def score_texts(state: ServerState, request: Request, pairs: list[tuple[str, str]],
                      request_id: str, param: str) -> tuple[list[float], int]:
    """Each pair's relevance score and the prompt tokens it took: a cross-encoder's output
    for the pair, or the cosine similarity of an embedding model's two embeddings."""
    pooler = served_pooler(state)
    if pooler.task == "score":
        try:
            prompts = [state.engine.tokenize_pair(a, b) for a, b in pairs]
        except (ValueError, TypeError) as exc:
            raise bad_request(str(exc), param) from None
        outputs = await encode_all(state, request, prompts, PoolingParams(task="score"),
                                   request_id, param)
        return [values(o)[0] for o in outputs], prompt_tokens(outputs)
    texts = list(dict.fromkeys(text for pair in pairs for text in pair))
    outputs = await encode_all(state, request, texts, PoolingParams(), request_id, param)
    embedded = {text: values(o) for text, o in zip(texts, outputs, strict=True)}
    return ([cosine_similarity(embedded[a], embedded[b]) for a, b in pairs],
            prompt_tokens(outputs))


def values(output: PoolingRequestOutput) -> list[float]:
    """A finished output's data (`encode_all` returns no aborted one)."""
    assert output.data is not None
    return output.data


def prompt_tokens(outputs: list[PoolingRequestOutput]) -> int:
    return sum(len(o.prompt_token_ids) for o in outputs)
