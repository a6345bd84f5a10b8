"""Tool calling's data: the tools a request offers, and the calls a model makes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class FunctionTool:
    """A function the model may call (OpenAI's `tools[i].function`, Anthropic's tool)."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    """JSON schema of the arguments object; None: any object."""
    strict: bool | None = None


@dataclass(frozen=True)
class ToolCall:
    """One call the model made."""

    name: str
    arguments: str
    """The arguments object as JSON text (OpenAI's `arguments`)."""
    id: str = ""
    """Given by the caller (the parser's `new_call_id`)."""


@dataclass
class ExtractedToolCalls:
    """A whole output split into its plain text and its calls."""

    content: str | None
    """The text outside the calls, without the format's markers; None when only whitespace."""
    calls: list[ToolCall] = field(default_factory=list)


@dataclass
class ToolCallDelta:
    """The next piece of one call in a streamed output."""

    index: int
    """Which call of the output (0, 1, ...)."""
    name: str | None
    """Set once, on the call's first delta."""
    arguments: str
    """The next piece of the arguments' JSON text (may be empty)."""


@dataclass
class StreamDelta:
    """What a streamed output's new text adds: plain text, and pieces of calls."""

    content: str = ""
    tool_calls: list[ToolCallDelta] = field(default_factory=list)
