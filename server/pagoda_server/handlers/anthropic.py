"""POST /v1/messages and /v1/messages/count_tokens (Anthropic Messages API)."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import AsyncGenerator, Iterator
from contextlib import aclosing
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from pagoda.outputs import CompletionOutput, RequestOutput
from pagoda_server.conversation import Prompt
from pagoda_server.generation import Outputs, final_outputs, start_generations
from pagoda_server.params import build_params
from pagoda_server.protocol.anthropic import CountTokensRequest, MessagesRequest
from pagoda_server.replies import ReplyDelta, ReplyFormat
from pagoda_server.state import server_state
from pagoda_server.streaming import anthropic_error_frame, event_frame, sse_response

router = APIRouter()


def _prompt(request: Request, body: CountTokensRequest) -> Prompt:
    return server_state(request).chat.prompt(
        body.conversation(), body.offered_tools, add_generation_prompt=not body.prefill,
        continue_final_message=body.prefill, thinking=_thinking(request, body))


def _thinking(request: Request, body: CountTokensRequest) -> bool | None:
    """The thinking switch, where the model has one ("disabled" asks nothing of a model
    that does not think)."""
    if body.thinking_switch is False and server_state(request).chat.reasoning is None:
        return None
    return body.thinking_switch


def _stop(completion: CompletionOutput, called: bool) -> dict[str, Any]:
    """stop_reason and stop_sequence of a finished completion."""
    if completion.finish_reason == "length":
        return {"stop_reason": "max_tokens", "stop_sequence": None}
    if isinstance(completion.stop_reason, str):
        return {"stop_reason": "stop_sequence", "stop_sequence": completion.stop_reason}
    return {"stop_reason": "tool_use" if called else "end_turn", "stop_sequence": None}


def _usage(output: RequestOutput, output_tokens: int) -> dict[str, int]:
    """Anthropic counts cached prompt tokens apart from `input_tokens`."""
    cached = output.num_cached_tokens
    return {"input_tokens": len(output.prompt_token_ids) - cached, "output_tokens": output_tokens,
            "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0}


def _message(message_id: str, model: str, content: list[dict[str, Any]],
             output: RequestOutput, stop: dict[str, Any], output_tokens: int) -> dict[str, Any]:
    return {"id": message_id, "type": "message", "role": "assistant", "model": model,
            "content": content, **stop, "usage": _usage(output, output_tokens)}


def _signature(thinking: str) -> str:
    """An opaque signature for a thinking block (not checked when it comes back)."""
    return hashlib.sha256(thinking.encode()).hexdigest()


@router.post("/v1/messages")
async def create_message(body: MessagesRequest, request: Request) -> Response:
    state = server_state(request)
    model = state.model_name(body.model)
    prompt = _prompt(request, body)
    tools = body.offered_tools
    fields = body.sampling_kwargs()
    if state.chat.keeps_special_tokens(bool(tools)):
        fields["skip_special_tokens"] = False
    budget = body.thinking.budget_tokens if body.thinking else None
    if budget is not None:
        fields.update(state.chat.thinking_budget(budget, "thinking.budget_tokens"))
    grammar = state.chat.grammar(tools, body.forced_tool, body.parallel_tool_calls,
                                 prompt.in_reasoning, None, "tools[{}].input_schema")
    if grammar is not None:
        fields["structured_outputs"] = grammar
    params = build_params(state, fields)
    message_id = f"msg_{uuid.uuid4().hex}"
    streams = await start_generations(state, request, [prompt.token_ids], params, message_id,
                                      model=model)
    replies = state.chat.replies(bool(tools), prompt.in_reasoning)
    omit = body.thinking is not None and body.thinking.display == "omitted"
    if body.stream:
        return sse_response(_events(message_id, model, streams[0], replies, omit),
                            anthropic_error_frame)
    (final,) = await final_outputs(streams)
    completion = final.outputs[0]
    reply = replies.parse(completion.text)
    content: list[dict[str, Any]] = []
    if reply.reasoning is not None:
        content.append({"type": "thinking", "thinking": "" if omit else reply.reasoning,
                        "signature": _signature(reply.reasoning)})
    if reply.content is not None or not reply.tool_calls:
        content.append({"type": "text", "text": reply.content or ""})
    content += [{"type": "tool_use", "id": c.id, "name": c.name,
                 "input": json.loads(c.arguments)} for c in reply.tool_calls]
    return JSONResponse(_message(message_id, model, content, final,
                                 _stop(completion, bool(reply.tool_calls)),
                                 len(completion.token_ids)))


class _Blocks:
    """A streamed reply's content blocks: each opened when its first piece comes, closed
    when the next one opens or the reply ends."""

    def __init__(self, omit_thinking: bool):
        self.omit_thinking = omit_thinking
        self.index = -1
        self.kind: str | None = None
        self.call_id: str | None = None
        self.thinking = ""

    def _open(self, kind: str, block: dict[str, Any]) -> Iterator[str]:
        yield from self.close()
        self.index += 1
        self.kind = kind
        yield event_frame("content_block_start", {"type": "content_block_start",
                                                  "index": self.index, "content_block": block})

    def _delta(self, delta: dict[str, Any]) -> str:
        return event_frame("content_block_delta", {"type": "content_block_delta",
                                                   "index": self.index, "delta": delta})

    def close(self) -> Iterator[str]:
        if self.kind is None:
            return
        if self.kind == "thinking":
            yield self._delta({"type": "signature_delta",
                               "signature": _signature(self.thinking)})
        yield event_frame("content_block_stop", {"type": "content_block_stop",
                                                 "index": self.index})
        self.kind = None

    def add(self, delta: ReplyDelta) -> Iterator[str]:
        if delta.reasoning:
            if self.kind != "thinking":
                yield from self._open("thinking", {"type": "thinking", "thinking": "",
                                                   "signature": ""})
            self.thinking += delta.reasoning
            if not self.omit_thinking:
                yield self._delta({"type": "thinking_delta", "thinking": delta.reasoning})
        if delta.content:
            if self.kind != "text":
                yield from self._open("text", {"type": "text", "text": ""})
            yield self._delta({"type": "text_delta", "text": delta.content})
        for call_id, piece in delta.tool_calls:
            if self.kind != "tool_use" or self.call_id != call_id:
                assert piece.name is not None, "a call's first piece names it"
                yield from self._open("tool_use", {"type": "tool_use", "id": call_id,
                                                   "name": piece.name, "input": {}})
                self.call_id = call_id
            if piece.arguments:
                yield self._delta({"type": "input_json_delta", "partial_json": piece.arguments})

    def finish(self) -> Iterator[str]:
        if self.index < 0:  # an empty reply still has its (empty) text block
            yield from self._open("text", {"type": "text", "text": ""})
        yield from self.close()


async def _events(message_id: str, model: str, outputs: Outputs, replies: ReplyFormat,
                  omit_thinking: bool) -> AsyncGenerator[str, None]:
    started, sent = False, 0
    parts = replies.stream()
    blocks = _Blocks(omit_thinking)
    async with aclosing(outputs):
        async for output in outputs:
            completion = output.outputs[0]
            if not started:
                no_stop = {"stop_reason": None, "stop_sequence": None}
                start = _message(message_id, model, [], output, no_stop, 0)
                yield event_frame("message_start", {"type": "message_start", "message": start})
                yield event_frame("ping", {"type": "ping"})
                started = True
            delta = parts.feed(completion.text[sent:], final=completion.finished)
            sent = len(completion.text)
            for frame in blocks.add(delta):
                yield frame
    for frame in blocks.finish():
        yield frame
    yield event_frame("message_delta", {"type": "message_delta",
                                        "delta": _stop(completion, parts.called),
                                        "usage": {"output_tokens": len(completion.token_ids)}})
    yield event_frame("message_stop", {"type": "message_stop"})


@router.post("/v1/messages/count_tokens")
async def count_tokens(body: CountTokensRequest, request: Request) -> Response:
    server_state(request).model_name(body.model)
    return JSONResponse({"input_tokens": len(_prompt(request, body).token_ids)})
