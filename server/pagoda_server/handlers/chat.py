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
from pagoda.tools import ToolCall
from pagoda_server.generation import Outputs, final_outputs, start_generations
from pagoda_server.openai_format import TokenTexts, chat_logprobs, usage
from pagoda_server.params import build_params, structured_outputs
from pagoda_server.protocol.chat import ChatCompletionRequest
from pagoda_server.replies import ReplyDelta, ReplyFormat
from pagoda_server.state import server_state
from pagoda_server.streaming import DONE, data_frame, openai_error_frame, sse_response

router = APIRouter()


@dataclass
class _Reply:
    request_id: str
    model: str
    texts: TokenTexts
    created: int
    replies: ReplyFormat

    def envelope(self, kind: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.request_id, "object": kind, "created": self.created,
                "model": self.model, "choices": choices}

    def logprobs(self, entries: list[TokenLogprobs] | None) -> dict[str, Any] | None:
        return None if entries is None else chat_logprobs(entries, self.texts)


@router.post("/v1/chat/completions")
async def create_chat_completion(body: ChatCompletionRequest, request: Request) -> Response:
    state = server_state(request)
    model = state.model_name(body.model)
    chat, tools = state.chat, body.offered_tools
    thinking = None if body.reasoning_effort is None else body.reasoning_effort != "none"
    prompt = chat.prompt([m.turn() for m in body.messages], tools,
                         add_generation_prompt=body.add_generation_prompt,
                         continue_final_message=body.continue_final_message,
                         template_kwargs=body.chat_template_kwargs, thinking=thinking)
    fields = {**body.sampling_kwargs(), "max_tokens": body.output_limit}
    if body.num_logprobs is not None:
        fields["logprobs"] = body.num_logprobs
    if chat.keeps_special_tokens(bool(tools)):
        fields.setdefault("skip_special_tokens", False)
    if body.thinking_budget is not None:
        fields.update(chat.thinking_budget(body.thinking_budget, "thinking_budget"))
    grammar = chat.grammar(tools, body.forced_tool, body.parallel_tool_calls is not False,
                           prompt.in_reasoning, structured_outputs(body))
    if grammar is not None:
        fields["structured_outputs"] = grammar
    params = build_params(state, fields)
    request_id = f"chatcmpl-{uuid.uuid4().hex}"
    streams = await start_generations(state, request, [prompt.token_ids], params, request_id,
                                      body.priority or 0, model)
    reply = _Reply(request_id, model, TokenTexts(state.engine.tokenizer), int(time.time()),
                   chat.replies(bool(tools), prompt.in_reasoning))
    if body.stream:
        return sse_response(_chunks(reply, streams[0], body), openai_error_frame)
    (final,) = await final_outputs(streams)
    choices = []
    for c in final.outputs:
        parsed = reply.replies.parse(c.text)
        message: dict[str, Any] = {"role": "assistant", "content": parsed.content,
                                   "refusal": None}
        if parsed.reasoning is not None:
            message["reasoning_content"] = parsed.reasoning
        if parsed.tool_calls:
            message["tool_calls"] = [_tool_call(call) for call in parsed.tool_calls]
        choices.append({"index": c.index, "message": message,
                        "logprobs": reply.logprobs(c.logprobs),
                        "finish_reason": _finish_reason(c.finish_reason,
                                                         bool(parsed.tool_calls))})
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
    parts = [reply.replies.stream() for _ in range(n)]
    final = None
    async with aclosing(outputs):
        async for final in outputs:
            for c in final.outputs:
                if finished[c.index]:
                    continue
                delta = parts[c.index].feed(c.text[chars[c.index]:], final=c.finished)
                new_logprobs = None if c.logprobs is None else c.logprobs[lps[c.index]:]
                if delta or new_logprobs or c.finished:
                    finish = (_finish_reason(c.finish_reason, parts[c.index].called)
                              if c.finished else None)
                    yield chunk(c.index, _delta(delta),
                                reply.logprobs(new_logprobs) if new_logprobs else None,
                                finish)
                chars[c.index], lps[c.index] = len(c.text), len(c.logprobs or [])
                finished[c.index] = c.finished
    if body.include_usage and final is not None:
        yield data_frame({**reply.envelope("chat.completion.chunk", []),
                          "usage": usage([final])})
    yield DONE


def _tool_call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function",
            "function": {"name": call.name, "arguments": call.arguments}}


def _finish_reason(reason: str | None, called: bool) -> str | None:
    """A reply that ended by itself after tool calls finishes with "tool_calls"."""
    return "tool_calls" if called and reason == "stop" else reason


def _delta(delta: ReplyDelta) -> dict[str, Any]:
    """A chunk's `delta`: new thinking, content and pieces of tool calls."""
    fields: dict[str, Any] = {}
    if delta.reasoning:
        fields["reasoning_content"] = delta.reasoning
    if delta.content:
        fields["content"] = delta.content
    if delta.tool_calls:
        calls = []
        for call_id, piece in delta.tool_calls:
            function: dict[str, Any] = {"arguments": piece.arguments}
            entry: dict[str, Any] = {"index": piece.index, "function": function}
            if piece.name is not None:
                entry.update(id=call_id, type="function")
                function["name"] = piece.name
            calls.append(entry)
        fields["tool_calls"] = calls
    return fields
