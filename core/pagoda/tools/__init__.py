"""Tool calling: the tools a request offers, parsers of the formats models call them in,
and the grammars that force a call."""

from pagoda.tools.parsers import (
    TOOL_PARSERS,
    ToolCallStream,
    ToolParser,
    detect_tool_parser,
    tool_parser,
)
from pagoda.tools.types import (
    ExtractedToolCalls,
    FunctionTool,
    StreamDelta,
    ToolCall,
    ToolCallDelta,
)

__all__ = [
    "TOOL_PARSERS",
    "ExtractedToolCalls",
    "FunctionTool",
    "StreamDelta",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallStream",
    "ToolParser",
    "detect_tool_parser",
    "tool_parser",
]
