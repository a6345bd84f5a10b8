"""Parsers of the formats models write tool calls in, by name."""

from __future__ import annotations

from pagoda.tools.parsers.base import ToolCallStream, ToolParser
from pagoda.tools.parsers.hermes import CALL_START, HermesToolParser
from pagoda.tools.parsers.llama3_json import PYTHON_TAG, Llama3JsonToolParser
from pagoda.tools.parsers.mistral import TOOL_CALLS, MistralToolParser

TOOL_PARSERS: dict[str, type[ToolParser]] = {
    parser.name: parser for parser in (HermesToolParser, Llama3JsonToolParser, MistralToolParser)
}

# Llama 3.1's JSON tool-calling instruction asks for this shape of object.
_LLAMA3_JSON_INSTRUCTION = '"parameters": dictionary of argument name'


def tool_parser(name: str) -> ToolParser:
    """The parser of the format called `name`."""
    if name not in TOOL_PARSERS:
        raise ValueError(f"unknown tool-call parser {name!r}; choose one of {sorted(TOOL_PARSERS)}")
    return TOOL_PARSERS[name]()


def detect_tool_parser(chat_template: str | None) -> str | None:
    """The format a chat template renders tool calls in, or None when it shows none."""
    if not chat_template:
        return None
    if CALL_START in chat_template:
        return HermesToolParser.name
    if TOOL_CALLS in chat_template:
        return MistralToolParser.name
    if PYTHON_TAG in chat_template or _LLAMA3_JSON_INSTRUCTION in chat_template:
        return Llama3JsonToolParser.name
    return None


__all__ = ["TOOL_PARSERS", "ToolCallStream", "ToolParser", "detect_tool_parser", "tool_parser"]
