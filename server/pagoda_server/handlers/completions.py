"""POST /v1/completions (OpenAI legacy completions)."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from pagoda.outputs import CompletionOutput, RequestOutput, TokenLogprobs
from pagoda_server.generation import Outputs, final_outputs, merge, start_generations
from pagoda_server.openai_format import TokenTexts, completion_logprobs, usage
from pagoda_server.params import build_params, structured_outputs
from pagoda_server.protocol.completions import CompletionRequest
from pagoda_server.state import server_state
from pagoda_server.streaming import DONE, data_frame, openai_error_frame, sse_response

router = APIRouter()


@dataclass
class _Reply:
    """What every choice of one response shares."""

    request_id: str
    model: str
    body: CompletionRequest
    texts: TokenTexts
    echoes: list[str]
    """Per prompt: its text when echoing, else ""."""
    created: int

    def envelope(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.request_id, "object": "text_completion", "created": self.created,
                "model": self.model, "choices": choices}

    def choice(self, prompt_index: int, completion: CompletionOutput, text: str,
               logprobs: list[TokenLogprobs] | None, offset: int) -> dict[str, Any]:
        """`offset`: where `text` starts in the choice's whole text."""
        return {
            "index": prompt_index * (self.body.n or 1) + completion.index,
            "text": text,
            "logprobs": None if logprobs is None else
            completion_logprobs(logprobs, self.texts, offset),
            "finish_reason": completion.finish_reason,
        }


@router.post("/v1/completions")
async def create_completion(body: CompletionRequest, request: Request) -> Response:
    state = server_state(request)
    model = state.model_name(body.model)
    fields = {**body.sampling_kwargs(), "max_tokens": body.max_tokens}
    if body.logprobs is not None:
        fields["logprobs"] = body.logprobs
    grammar = structured_outputs(body)
    if grammar is not None:
        fields["structured_outputs"] = grammar
    params = build_params(state, fields)
    request_id = f"cmpl-{uuid.uuid4().hex}"
    streams = await start_generations(state, request, body.prompts(), params, request_id,
                                      body.priority or 0, model)
    tokenizer = state.engine.tokenizer
    echoes = [""] * len(streams)
    if body.echo:
        echoes = [p if isinstance(p, str) else tokenizer.decode(p) for p in body.prompts()]
    reply = _Reply(request_id, model, body, TokenTexts(tokenizer), echoes, int(time.time()))
    if body.stream:
        return sse_response(_chunks(reply, streams), openai_error_frame)
    finals = await final_outputs(streams)
    choices = [
        reply.choice(i, c, reply.echoes[i] + c.text, c.logprobs, len(reply.echoes[i]))
        for i, final in enumerate(finals) for c in final.outputs
    ]
    return JSONResponse({**reply.envelope(choices), "usage": usage(finals)})


@dataclass
class _Sent:
    """How much of one choice a stream has sent."""

    chars: int = 0
    logprobs: int = 0
    started: bool = False
    finished: bool = False


async def _chunks(reply: _Reply, streams: list[Outputs]) -> AsyncGenerator[str, None]:
    sent: dict[tuple[int, int], _Sent] = defaultdict(_Sent)
    finals: dict[int, RequestOutput] = {}
    async with aclosing(merge(streams)) as outputs:
        async for prompt_index, output in outputs:
            finals[prompt_index] = output
            for c in output.outputs:
                s = sent[(prompt_index, c.index)]
                if s.finished:
                    continue
                text = ("" if s.started else reply.echoes[prompt_index]) + c.text[s.chars:]
                new_logprobs = None if c.logprobs is None else c.logprobs[s.logprobs:]
                if not text and not new_logprobs and not c.finished:
                    continue
                offset = len(reply.echoes[prompt_index]) + s.chars
                yield data_frame(reply.envelope([
                    reply.choice(prompt_index, c, text, new_logprobs, offset)]))
                s.chars, s.logprobs = len(c.text), len(c.logprobs or [])
                s.started, s.finished = True, c.finished
    if reply.body.include_usage:
        yield data_frame({**reply.envelope([]), "usage": usage(list(finals.values()))})
    yield DONE
