"""POST /v1/chat/completions request body."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from pagoda.tools import FunctionTool
from pagoda_server.conversation import Turn
from pagoda_server.protocol.common import RequestModel, joined_text, text_only
from pagoda_server.protocol.sampling import SamplingRequest
from pagoda_server.protocol.tools import ChatTool, NamedToolChoice, ToolCallParam, ToolChoice

ROLES = ("system", "developer", "user", "assistant", "tool")


class TextPart(RequestModel):
    type: Literal["text"]
    text: str
    prompt_cache_breakpoint: dict[str, Any] | None = None
    """Accepted: prefix caching is automatic."""


Content = Annotated[str | list[TextPart], BeforeValidator(text_only)]


class ChatMessage(RequestModel):
    ACCEPTED_DEFAULTS: ClassVar[dict[str, tuple[Any, ...]]] = {
        "function_call": (), "audio": (),
    }

    role: str
    content: Content | None = None
    name: str | None = None
    refusal: str | None = None
    tool_calls: list[ToolCallParam] | None = None
    """An assistant's calls."""
    tool_call_id: str | None = None
    """A tool message's answer to this call."""
    reasoning_content: str | None = None
    """An assistant's earlier thinking (templates that show it to the model use it)."""
    function_call: Any = None
    audio: Any = None

    @field_validator("role")
    @classmethod
    def _known_role(cls, role: str) -> str:
        if role == "function":
            raise ValueError("'function' messages (deprecated) are not supported: send "
                             "'tool' messages")
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        return role

    @model_validator(mode="after")
    def _fields_of_its_role(self) -> ChatMessage:
        if self.content is None and self.role != "assistant":
            raise ValueError(f"a {self.role} message needs content")
        if self.role == "tool" and self.tool_call_id is None:
            raise ValueError("a tool message needs tool_call_id")
        for name in ("tool_calls", "reasoning_content"):
            if getattr(self, name) is not None and self.role != "assistant":
                raise ValueError(f"{name} belongs to assistant messages, not {self.role}")
        if self.tool_call_id is not None and self.role != "tool":
            raise ValueError(f"tool_call_id belongs to tool messages, not {self.role}")
        return self

    def turn(self) -> Turn:
        """The message as the conversation renderer takes it (developer becomes system)."""
        return Turn("system" if self.role == "developer" else self.role,
                    joined_text(self.content or ""), name=self.name,
                    tool_calls=[c.call() for c in self.tool_calls or []],
                    tool_call_id=self.tool_call_id, reasoning=self.reasoning_content)


class ChatTemplateFields(RequestModel):
    """How the conversation becomes a prompt (extras beyond the OpenAI API)."""

    add_generation_prompt: bool = True
    continue_final_message: bool = False
    """Continue the last (assistant) message instead of starting a new one."""
    chat_template_kwargs: dict[str, Any] | None = None


class ChatCompletionRequest(SamplingRequest, ChatTemplateFields):
    ACCEPTED_DEFAULTS: ClassVar[dict[str, tuple[Any, ...]]] = {
        "store": (False,), "service_tier": ("auto", "default"), "modalities": (["text"],),
        "functions": (), "function_call": ("none",),
        "audio": (), "prediction": (), "web_search_options": (),
        "verbosity": (), "moderation": (), "prompt_cache_options": (),
        "prompt_cache_retention": ("in_memory",),
    }

    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    metadata: dict[str, str] | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    """`metadata`, `safety_identifier`, `prompt_cache_key`: accepted, unused."""

    store: Any = None
    service_tier: Any = None
    modalities: Any = None
    tools: list[ChatTool] | None = Field(None, max_length=128)
    tool_choice: ToolChoice | None = None
    """none, auto (the default with tools), required, or a named function."""
    parallel_tool_calls: bool | None = None
    """False: at most one call (default: any number)."""
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    """With a reasoning model: none turns thinking off; any other value, on (the model
    decides how long it thinks)."""
    thinking_budget: int | None = Field(None, ge=0)
    """Pagoda's extension, with a reasoning model: the most tokens it may think for; then
    its thinking is ended for it and it answers."""
    functions: Any = None
    function_call: Any = None
    audio: Any = None
    prediction: Any = None
    web_search_options: Any = None
    verbosity: Any = None
    moderation: Any = None
    prompt_cache_options: Any = None
    prompt_cache_retention: Any = None

    @model_validator(mode="after")
    def _check(self) -> ChatCompletionRequest:
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs set to true")
        names = [t.function.name for t in self.tools or []]
        if len(set(names)) < len(names):
            raise ValueError("tools: two tools have the same name")
        if isinstance(self.tool_choice, NamedToolChoice):
            if self.tool_choice.function.name not in names:
                raise ValueError(f"tool_choice: the function {self.tool_choice.function.name!r} "
                                 "is not among the tools")
        elif self.tool_choice == "required" and not names:
            raise ValueError("tool_choice: \"required\" needs tools")
        return self

    @property
    def offered_tools(self) -> list[FunctionTool]:
        """The tools the model may call ([] when tool_choice is none)."""
        if self.tool_choice == "none":
            return []
        return [t.function.tool() for t in self.tools or []]

    @property
    def forced_tool(self) -> FunctionTool | str | None:
        """tool_choice as the grammar takes it: the named tool, "required", or None."""
        if isinstance(self.tool_choice, NamedToolChoice):
            name = self.tool_choice.function.name
            return next(t for t in self.offered_tools if t.name == name)
        return "required" if self.tool_choice == "required" else None

    @property
    def output_limit(self) -> int | None:
        """max_completion_tokens, else the deprecated max_tokens."""
        return self.max_completion_tokens if self.max_completion_tokens is not None \
            else self.max_tokens

    @property
    def num_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None
