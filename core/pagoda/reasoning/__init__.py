"""Reasoning parsers: a reasoning model's output split into its thinking and its answer
(OpenAI-compatible servers return them as `reasoning_content` and `content`)."""

from pagoda.reasoning.parser import (
    REASONING_PARSERS,
    ReasoningParser,
    ReasoningStream,
    reasoning_parser,
)

__all__ = ["REASONING_PARSERS", "ReasoningParser", "ReasoningStream", "reasoning_parser"]
