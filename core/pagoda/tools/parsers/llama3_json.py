"""Llama 3.1/3.2/3.3 JSON tool calls: the whole output is `{"name": ..., "parameters": {...}}`
objects separated by `;`, optionally after `<|python_tag|>`; any other output is content."""

from __future__ import annotations

import json

from pagoda.tools.parsers.base import (
    MalformedCall,
    ToolCallStream,
    ToolParser,
    arguments_object,
    expect_marker,
    skip_whitespace,
    tool_json,
)
from pagoda.tools.parsers.call_object import CallObject
from pagoda.tools.types import FunctionTool, ToolCall

PYTHON_TAG = "<|python_tag|>"


class Llama3JsonToolParser(ToolParser):
    name = "llama3_json"
    grammar_format = "llama3_json"
    markers = (PYTHON_TAG,)

    def stream(self) -> ToolCallStream:
        return _Llama3JsonStream()

    def tools_system_prompt(self, tools: list[FunctionTool]) -> str:
        listed = "\n\n".join(tool_json(tool) for tool in tools)
        return (
            "You can call the functions below to help with the user's request. To call one, "
            "answer with nothing but a JSON object of the form "
            '{"name": <function name>, "parameters": <the arguments as a JSON object>}. '
            "To call several, separate the objects with ';'. Use literal values, not "
            f"variables.\n\n{listed}"
        )

    def render_calls(self, calls: list[ToolCall]) -> str:
        return "; ".join(
            f'{{"name": {json.dumps(call.name, ensure_ascii=False)}, '
            f'"parameters": {arguments_object(call)}}}'
            for call in calls
        )

    def render_result(self, content: str, call: ToolCall | None) -> str:
        result = {"output": content} if call is None else {"name": call.name, "output": content}
        return json.dumps(result, ensure_ascii=False)


class _Llama3JsonStream(ToolCallStream):
    def __init__(self) -> None:
        super().__init__()
        self._state = "start"
        self._object: CallObject | None = None

    def _advance(self, text: str, final: bool) -> None:
        while True:
            pos = skip_whitespace(text, self._pos)
            if self._state == "call":
                assert self._object is not None
                self._pos = self._object.step(text, self._pos, final)
                self._sync(self._object)
                if not self._object.complete:
                    return
                self._state = "after"
            elif pos == len(text):
                if final and self._state == "next" and self._object is None:
                    raise MalformedCall(pos)  # a python tag, and no call after it
                return
            elif self._state == "start":
                tag = expect_marker(text, pos, PYTHON_TAG, final)
                if tag is None:
                    return
                if not tag and text[pos] != "{":
                    self._plain(0)
                    return
                self._pos = pos + len(PYTHON_TAG) if tag else pos
                self._state = "next"
            elif self._state == "next":
                if text[pos] != "{":
                    raise MalformedCall(pos)
                self._call = self._object = CallObject(0 if self._object is None else pos)
                self._pos = pos
                self._state = "call"
            elif text[pos] == ";":
                self._pos = pos + 1
                self._state = "next"
            else:
                raise MalformedCall(pos)
