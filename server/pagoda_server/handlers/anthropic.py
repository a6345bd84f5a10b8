"""POST /v1/messages and /v1/messages/count_tokens (Anthropic Messages API)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from pagoda.outputs import CompletionOutput, RequestOutput
from pagoda_server.chat_template import render_chat
from pagoda_server.generation import Outputs, final_outputs, start_generations
from pagoda_server.params import build_params
from pagoda_server.protocol.anthropic import CountTokensRequest, MessagesRequest
from pagoda_server.state import server_state
from pagoda_server.streaming import anthropic_error_frame, event_frame, sse_response

router = APIRouter()


def _prompt(request: Request, body: CountTokensRequest) -> list[int]:
    return render_chat(server_state(request).engine.tokenizer, body.conversation(),
                       add_generation_prompt=not body.prefill,
                       continue_final_message=body.prefill)


def _stop(completion: CompletionOutput) -> dict[str, Any]:
    """stop_reason and stop_sequence of a finished completion."""
    if completion.finish_reason == "length":
        return {"stop_reason": "max_tokens", "stop_sequence": None}
    if isinstance(completion.stop_reason, str):
        return {"stop_reason": "stop_sequence", "stop_sequence": completion.stop_reason}
    return {"stop_reason": "end_turn", "stop_sequence": None}


def _usage(output: RequestOutput, output_tokens: int) -> dict[str, int]:
    """Anthropic counts cached prompt tokens apart from `input_tokens`."""
    cached = output.num_cached_tokens
    return {"input_tokens": len(output.prompt_token_ids) - cached, "output_tokens": output_tokens,
            "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0}


def _message(message_id: str, model: str, content: list[dict[str, Any]],
             output: RequestOutput, stop: dict[str, Any], output_tokens: int) -> dict[str, Any]:
    return {"id": message_id, "type": "message", "role": "assistant", "model": model,
            "content": content, **stop, "usage": _usage(output, output_tokens)}


@router.post("/v1/messages")
async def create_message(body: MessagesRequest, request: Request) -> Response:
    state = server_state(request)
    model = state.model_name(body.model)
    prompt = _prompt(request, body)
    params = build_params(state, body.sampling_kwargs())
    message_id = f"msg_{uuid.uuid4().hex}"
    streams = await start_generations(state, request, [prompt], params, message_id)
    if body.stream:
        return sse_response(_events(message_id, model, streams[0]), anthropic_error_frame)
    (final,) = await final_outputs(streams)
    completion = final.outputs[0]
    content = [{"type": "text", "text": completion.text}]
    return JSONResponse(_message(message_id, model, content, final, _stop(completion),
                                 len(completion.token_ids)))


async def _events(message_id: str, model: str, outputs: Outputs) -> AsyncGenerator[str, None]:
    started, sent = False, 0
    async with aclosing(outputs):
        async for output in outputs:
            completion = output.outputs[0]
            if not started:
                no_stop = {"stop_reason": None, "stop_sequence": None}
                start = _message(message_id, model, [], output, no_stop, 0)
                yield event_frame("message_start", {"type": "message_start", "message": start})
                yield event_frame("content_block_start", {
                    "type": "content_block_start", "index": 0,
                    "content_block": {"type": "text", "text": ""}})
                yield event_frame("ping", {"type": "ping"})
                started = True
            if len(completion.text) > sent:
                yield event_frame("content_block_delta", {
                    "type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": completion.text[sent:]}})
                sent = len(completion.text)
    yield event_frame("content_block_stop", {"type": "content_block_stop", "index": 0})
    yield event_frame("message_delta", {"type": "message_delta", "delta": _stop(completion),
                                        "usage": {"output_tokens": len(completion.token_ids)}})
    yield event_frame("message_stop", {"type": "message_stop"})


@router.post("/v1/messages/count_tokens")
async def count_tokens(body: CountTokensRequest, request: Request) -> Response:
    server_state(request).model_name(body.model)
    return JSONResponse({"input_tokens": len(_prompt(request, body))})
