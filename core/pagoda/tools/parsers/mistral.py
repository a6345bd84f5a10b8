"""Mistral tool calls: `[TOOL_CALLS]` then a JSON array of `{"name": ..., "arguments": {...}}`
objects (v3 tokenizers), or `[TOOL_CALLS]name[ARGS]{...}` once per call (newer ones). Text
before and between the calls is content."""

from __future__ import annotations

import json

from pagoda.tools.json_scan import WHITESPACE, JsonValueScanner
from pagoda.tools.parsers.base import (
    MalformedCall,
    PendingCall,
    ToolCallStream,
    ToolParser,
    arguments_object,
    expect_marker,
    partial_marker,
    random_id,
    skip_whitespace,
    tool_json,
)
from pagoda.tools.parsers.call_object import CallObject
from pagoda.tools.types import FunctionTool, ToolCall

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
_NOT_IN_NAME = frozenset(WHITESPACE + '{}[]"')


class MistralToolParser(ToolParser):
    name = "mistral"
    grammar_format = "mistral"
    markers = (TOOL_CALLS, ARGS)

    def stream(self) -> ToolCallStream:
        return _MistralStream()

    def new_call_id(self) -> str:
        return random_id(9)  # Mistral's templates require 9 letters and digits

    def tools_system_prompt(self, tools: list[FunctionTool]) -> str:
        listed = "[" + ", ".join(tool_json(tool) for tool in tools) + "]"
        return (
            f"You can call these functions to help with the user's request: {listed}\n\n"
            f"To call them, write {TOOL_CALLS} followed by a JSON array of the calls: "
            f'{TOOL_CALLS}[{{"name": <function name>, "arguments": <arguments as a JSON '
            "object>}, ...]"
        )

    def render_calls(self, calls: list[ToolCall]) -> str:
        items = []
        for call in calls:
            call_id = f', "id": {json.dumps(call.id)}' if call.id else ""
            items.append(
                f'{{"name": {json.dumps(call.name, ensure_ascii=False)}, '
                f'"arguments": {arguments_object(call)}{call_id}}}'
            )
        return TOOL_CALLS + "[" + ", ".join(items) + "]" if items else ""

    def render_result(self, content: str, call: ToolCall | None) -> str:
        result = {"content": content}
        if call is not None and call.id:
            result["call_id"] = call.id
        return f"[TOOL_RESULTS]{json.dumps(result, ensure_ascii=False)}[/TOOL_RESULTS]"


class _MistralStream(ToolCallStream):
    def __init__(self) -> None:
        super().__init__()
        self._state = "text"
        self._object: CallObject | None = None
        self._arguments: JsonValueScanner | None = None

    def _advance(self, text: str, final: bool) -> None:
        while True:
            if self._state == "text":
                start = text.find(TOOL_CALLS, self._pos)
                if start < 0:
                    end = len(text) - (0 if final else partial_marker(text, self._pos, TOOL_CALLS))
                    self._emit_content(text[self._pos : end])
                    self._pos = end
                    return
                self._emit_content(text[self._pos : start])
                self._segment_start = start
                self._call = None
                self._pos = start + len(TOOL_CALLS)
                self._state = "marker"
                continue
            if self._state == "object":
                assert self._object is not None
                self._pos = self._object.step(text, self._pos, final)
                self._sync(self._object)
                if not self._object.complete:
                    return
                self._state = "array_next"
                continue
            if self._state == "name":
                if not self._read_name(text, final):
                    return
                continue
            if self._state == "arguments":
                if not self._read_arguments(text, final):
                    return
                continue
            pos = skip_whitespace(text, self._pos)
            if pos == len(text):
                if final:
                    raise MalformedCall(pos)
                return
            self._after_whitespace(text[pos], pos)

    def _after_whitespace(self, c: str, pos: int) -> None:
        """The states that skip whitespace, at the first character after it."""
        state = self._state
        if state == "marker" and c == "[":
            self._state = "array_first"
            pos += 1
        elif state == "marker":
            self._call = PendingCall(self._segment_start)
            self._state = "name"
        elif state in ("array_first", "array_item") and c == "{":
            start = self._segment_start if state == "array_first" else pos
            self._call = self._object = CallObject(start)
            self._state = "object"
        elif state in ("array_first", "array_next") and c == "]":
            self._state = "text"
            pos += 1
        elif state == "array_next" and c == ",":
            self._state = "array_item"
            pos += 1
        elif state == "arguments_start" and c == "{":
            assert self._call is not None
            self._call.committed = True
            self._arguments = JsonValueScanner()
            self._state = "arguments"
        else:
            raise MalformedCall(pos)
        self._pos = pos

    def _read_name(self, text: str, final: bool) -> bool:
        """Reads `name[ARGS]`; False while more text is needed."""
        end = self._pos
        while end < len(text) and text[end] not in _NOT_IN_NAME:
            end += 1
        found = expect_marker(text, end, ARGS, final) if end < len(text) or final else None
        if found is None:
            return False
        if not found or end == self._pos:
            raise MalformedCall(end)
        assert self._call is not None
        self._call.name = text[self._pos : end]
        self._pos = end + len(ARGS)
        self._state = "arguments_start"
        return True

    def _read_arguments(self, text: str, final: bool) -> bool:
        """Streams `{...}` after [ARGS]; False while more text is needed."""
        assert self._arguments is not None and self._call is not None
        end = self._arguments.scan(text, self._pos)
        self._call.arguments += text[self._pos : end]
        self._pos = end
        self._sync(self._call)
        if self._arguments.error or final and not self._arguments.done:
            raise MalformedCall(end)
        if not self._arguments.done:
            return False
        try:
            valid = isinstance(json.loads(self._call.arguments), dict)
        except ValueError:
            valid = False
        if not valid:
            raise MalformedCall(end)
        self._call.complete = True
        self._state = "text"
        return True
