"""POST /v1/messages and /v1/messages/count_tokens request bodies (Anthropic Messages API)."""

from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from pagoda.tools import FunctionTool, ToolCall
from pagoda_server.conversation import Turn
from pagoda_server.protocol.common import RequestModel, joined_text, text_only

BLOCK_TYPES = ("text", "tool_use", "tool_result", "thinking", "redacted_thinking")


class TextBlock(RequestModel):
    ACCEPTED_DEFAULTS: ClassVar[dict[str, tuple[Any, ...]]] = {"citations": ([],)}

    type: Literal["text"]
    text: str
    cache_control: dict[str, Any] | None = None
    """Accepted: prefix caching is automatic."""
    citations: Any = None


Text = Annotated[str | list[TextBlock], BeforeValidator(text_only)]


class ToolUseBlock(RequestModel):
    """An earlier call, in an assistant message."""

    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]
    cache_control: dict[str, Any] | None = None

    def call(self) -> ToolCall:
        return ToolCall(self.name, json.dumps(self.input, ensure_ascii=False), self.id)


class ToolResultBlock(RequestModel):
    """A tool's answer to a call, in a user message."""

    type: Literal["tool_result"]
    tool_use_id: str
    content: Text | None = None
    is_error: bool | None = None
    cache_control: dict[str, Any] | None = None

    def turn(self) -> Turn:
        text = joined_text(self.content or "")
        return Turn("tool", f"Error: {text}" if self.is_error else text,
                    tool_call_id=self.tool_use_id)


class ThinkingBlock(RequestModel):
    """An assistant's earlier thinking (its signature is not checked)."""

    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


def _known_blocks(value: Any) -> Any:
    """Reject blocks of other types with a message naming the block and its type."""
    if isinstance(value, list):
        for i, block in enumerate(value):
            kind = block.get("type") if isinstance(block, dict) else type(block).__name__
            if kind == "redacted_thinking":
                raise ValueError(f"content[{i}]: redacted_thinking blocks come from Anthropic's "
                                 "models; this server cannot read them")
            if kind not in BLOCK_TYPES:
                raise ValueError(f"content[{i}] is of type {kind!r}: this server accepts "
                                 f"{', '.join(BLOCK_TYPES[:4])} blocks")
    return value


Block = Annotated[TextBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock,
                  Field(discriminator="type")]
Content = Annotated[str | list[Block], BeforeValidator(_known_blocks)]


class Message(RequestModel):
    role: Literal["user", "assistant"]
    content: Content

    @model_validator(mode="after")
    def _blocks_of_its_role(self) -> Message:
        if isinstance(self.content, list):
            allowed = ("text", "tool_result") if self.role == "user" else \
                ("text", "tool_use", "thinking")
            for i, block in enumerate(self.content):
                if block.type not in allowed:
                    raise ValueError(f"content[{i}]: {block.type} blocks belong to "
                                     f"{'assistant' if self.role == 'user' else 'user'} "
                                     "messages")
        return self

    def turns(self) -> list[Turn]:
        """The message as the conversation renderer takes it: a user message's tool results
        become tool turns before its text; an assistant's thinking and calls stay with it."""
        if isinstance(self.content, str):
            return [Turn(self.role, self.content)]
        text = "\n".join(b.text for b in self.content if isinstance(b, TextBlock))
        if self.role == "assistant":
            thinking = [b.thinking for b in self.content if isinstance(b, ThinkingBlock)]
            calls = [b.call() for b in self.content if isinstance(b, ToolUseBlock)]
            return [Turn("assistant", text, tool_calls=calls,
                         reasoning="\n".join(thinking) if thinking else None)]
        results = [b.turn() for b in self.content if isinstance(b, ToolResultBlock)]
        has_text = any(isinstance(b, TextBlock) for b in self.content)
        return results + ([Turn("user", text)] if has_text or not results else [])


class Tool(RequestModel):
    ACCEPTED_DEFAULTS: ClassVar[dict[str, tuple[Any, ...]]] = {
        "allowed_callers": (["direct"],), "defer_loading": (False,), "input_examples": ([],),
    }

    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,128}$")
    description: str | None = None
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None
    """Only custom tools: Anthropic's server tools run on Anthropic's servers."""
    strict: bool | None = None
    """Accepted either way: forced calls always follow the schema exactly."""
    cache_control: dict[str, Any] | None = None
    eager_input_streaming: bool | None = None
    """Accepted: inputs always stream as they are generated."""
    allowed_callers: Any = None
    defer_loading: Any = None
    input_examples: Any = None

    @field_validator("input_schema")
    @classmethod
    def _an_object_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        if schema.get("type") != "object":
            raise ValueError("must be the JSON schema of an object (\"type\": \"object\")")
        return schema

    def tool(self) -> FunctionTool:
        return FunctionTool(self.name, self.description, self.input_schema, self.strict)


class ToolChoice(RequestModel):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None

    @model_validator(mode="after")
    def _name_with_tool(self) -> ToolChoice:
        if (self.type == "tool") != (self.name is not None):
            raise ValueError("name is required with type \"tool\", and only then")
        return self


class ThinkingConfig(RequestModel):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(None, ge=1)
    """With "enabled": how many tokens the model may think for, at most (any number here:
    Anthropic's own floor of 1024 is its models' need, not ours)."""
    display: Literal["summarized", "omitted"] | None = None
    """omitted: thinking blocks come back empty (the thinking still happens)."""

    @model_validator(mode="after")
    def _budget_when_enabled(self) -> ThinkingConfig:
        if (self.type == "enabled") != (self.budget_tokens is not None):
            raise ValueError("budget_tokens is required with type \"enabled\", and only then")
        return self


class CountTokensRequest(RequestModel):
    ACCEPTED_DEFAULTS: ClassVar[dict[str, tuple[Any, ...]]] = {
        "service_tier": ("auto", "standard_only"), "speed": ("standard",),
        "container": (), "mcp_servers": (), "output_config": (), "output_format": (),
        "diagnostics": (), "context_management": (),
    }

    model: str
    messages: list[Message] = Field(min_length=1)
    system: Text | None = None
    cache_control: dict[str, Any] | None = None
    """Accepted: prefix caching is automatic."""
    user_profile_id: str | None = None
    workspace_id: str | None = None
    """`user_profile_id`, `workspace_id`: accepted, unused."""
    tools: list[Tool] | None = Field(None, max_length=128)
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None
    service_tier: Any = None
    speed: Any = None
    container: Any = None
    mcp_servers: Any = None
    output_config: Any = None
    output_format: Any = None
    diagnostics: Any = None
    context_management: Any = None

    @model_validator(mode="after")
    def _tool_choice_among_tools(self) -> CountTokensRequest:
        names = [t.name for t in self.tools or []]
        if len(set(names)) < len(names):
            raise ValueError("tools: two tools have the same name")
        choice = self.tool_choice
        if choice is not None and choice.type == "tool" and choice.name not in names:
            raise ValueError(f"tool_choice: the tool {choice.name!r} is not among the tools")
        if choice is not None and choice.type == "any" and not names:
            raise ValueError("tool_choice: \"any\" needs tools")
        return self

    def conversation(self) -> list[Turn]:
        """The system prompt and messages as conversation turns."""
        turns = [t for m in self.messages for t in m.turns()]
        if self.system:
            turns.insert(0, Turn("system", joined_text(self.system)))
        return turns

    @property
    def offered_tools(self) -> list[FunctionTool]:
        """The tools the model may call ([] when tool_choice is none)."""
        if self.tool_choice is not None and self.tool_choice.type == "none":
            return []
        return [t.tool() for t in self.tools or []]

    @property
    def forced_tool(self) -> FunctionTool | str | None:
        """tool_choice as the grammar takes it: the named tool, "required", or None."""
        choice = self.tool_choice
        if choice is None or choice.type in ("auto", "none"):
            return None
        if choice.type == "any":
            return "required"
        return next(t for t in self.offered_tools if t.name == choice.name)

    @property
    def parallel_tool_calls(self) -> bool:
        return not (self.tool_choice and self.tool_choice.disable_parallel_tool_use)

    @property
    def thinking_switch(self) -> bool | None:
        """Thinking on or off, or None: the template's default."""
        return None if self.thinking is None else self.thinking.type != "disabled"

    @property
    def prefill(self) -> bool:
        """A final assistant message is continued, not answered."""
        last = self.messages[-1]
        return last.role == "assistant" and not any(t.tool_calls for t in last.turns())


class MessagesRequest(CountTokensRequest):
    max_tokens: int
    stop_sequences: list[str] | None = None
    stream: bool | None = None
    temperature: float | None = Field(None, ge=0, le=1)
    top_p: float | None = None
    top_k: int | None = None
    metadata: dict[str, Any] | None = None
    inference_geo: str | None = None
    """`metadata`, `inference_geo`: accepted, unused."""

    @model_validator(mode="after")
    def _budget_under_max_tokens(self) -> MessagesRequest:
        budget = self.thinking.budget_tokens if self.thinking else None
        if budget is not None and budget >= self.max_tokens:
            raise ValueError("thinking.budget_tokens: must be less than max_tokens")
        return self

    def sampling_kwargs(self) -> dict[str, Any]:
        kwargs = self.set_values(("temperature", "top_p", "top_k", "max_tokens"))
        if self.stop_sequences:
            kwargs["stop"] = self.stop_sequences
        return kwargs
