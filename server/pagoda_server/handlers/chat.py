"""POST /v1/chat/completions (OpenAI chat completions)."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from pagoda.outputs import TokenLogprobs
from pagoda_server.chat_template import render_chat
from pagoda_server.generation import Outputs, final_outputs, start_generations
from pagoda_server.openai_format import TokenTexts, chat_logprobs, usage
from pagoda_server.params import build_params, structured_outputs
from pagoda_server.protocol.chat import ChatCompletionRequest
from pagoda_server.state import server_state
from pagoda_server.streaming import DONE, data_frame, openai_error_frame, sse_response

router = APIRouter()


@dataclass
class _Reply:
    request_id: str
    model: str
    texts: TokenTexts
    created: int

    def envelope(self, kind: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.request_id, "object": kind, "created": self.created,
                "model": self.model, "choices": choices}

    def logprobs(self, entries: list[TokenLogprobs] | None) -> dict[str, Any] | None:
        return None if entries is None else chat_logprobs(entries, self.texts)


@router.post("/v1/chat/completions")
async def create_chat_completion(body: ChatCompletionRequest, request: Request) -> Response:
    state = server_state(request)
    model = state.model_name(body.model)
    prompt = render_chat(state.engine.tokenizer, [m.for_template() for m in body.messages],
                         add_generation_prompt=body.add_generation_prompt,
                         continue_final_message=body.continue_final_message,
                         template_kwargs=body.chat_template_kwargs)
    fields = {**body.sampling_kwargs(), "max_tokens": body.output_limit}
    if body.num_logprobs is not None:
        fields["logprobs"] = body.num_logprobs
    grammar = structured_outputs(body)
    if grammar is not None:
        fields["structured_outputs"] = grammar
    params = build_params(state, fields)
    request_id = f"chatcmpl-{uuid.uuid4().hex}"
    streams = await start_generations(state, request, [prompt], params, request_id,
                                      body.priority or 0)
    reply = _Reply(request_id, model, TokenTexts(state.engine.tokenizer), int(time.time()))
    if body.stream:
        return sse_response(_chunks(reply, streams[0], body), openai_error_frame)
    (final,) = await final_outputs(streams)
    choices = [{
        "index": c.index,
        "message": {"role": "assistant", "content": c.text, "refusal": None},
        "logprobs": reply.logprobs(c.logprobs),
        "finish_reason": c.finish_reason,
    } for c in final.outputs]
    return JSONResponse({**reply.envelope("chat.completion", choices),
                         "usage": usage([final])})


async def _chunks(reply: _Reply, outputs: Outputs,
                  body: ChatCompletionRequest) -> AsyncGenerator[str, None]:
    extra = {"usage": None} if body.include_usage else {}

    def chunk(index: int, delta: dict[str, Any], logprobs: dict[str, Any] | None = None,
              finish_reason: str | None = None) -> str:
        choice = {"index": index, "delta": delta, "logprobs": logprobs,
                  "finish_reason": finish_reason}
        return data_frame({**reply.envelope("chat.completion.chunk", [choice]), **extra})

    n = body.n or 1
    for index in range(n):
        yield chunk(index, {"role": "assistant", "content": ""})
    chars, lps, finished = [0] * n, [0] * n, [False] * n
    final = None
    async with aclosing(outputs):
        async for final in outputs:
            for c in final.outputs:
                if finished[c.index]:
                    continue
                text = c.text[chars[c.index]:]
                new_logprobs = None if c.logprobs is None else c.logprobs[lps[c.index]:]
                if text or new_logprobs or c.finished:
                    yield chunk(c.index, {"content": text} if text else {},
                                reply.logprobs(new_logprobs) if new_logprobs else None,
                                c.finish_reason)
                chars[c.index], lps[c.index] = len(c.text), len(c.logprobs or [])
                finished[c.index] = c.finished
    if body.include_usage and final is not None:
        yield data_frame({**reply.envelope("chat.completion.chunk", []),
                          "usage": usage([final])})
    yield DONE
