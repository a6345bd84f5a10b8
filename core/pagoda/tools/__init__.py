"""Tool calling: the tools a request offers, parsers of the formats models call them in,
and the grammars that force a call."""

from pagoda.tools.types import (
    ExtractedToolCalls,
    FunctionTool,
    StreamDelta,
    ToolCall,
    ToolCallDelta,
)

__all__ = ["ExtractedToolCalls", "FunctionTool", "StreamDelta", "ToolCall", "ToolCallDelta"]
