"""POST /v1/chat/completions request body."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from pagoda_server.protocol.common import RequestModel, joined_text, text_only
from pagoda_server.protocol.sampling import SamplingRequest

ROLES = ("system", "developer", "user", "assistant")


class TextPart(RequestModel):
    type: Literal["text"]
    text: str
    prompt_cache_breakpoint: dict[str, Any] | None = None
    """Accepted: prefix caching is automatic."""


Content = Annotated[str | list[TextPart], BeforeValidator(text_only)]


class ChatMessage(RequestModel):
    ACCEPTED_DEFAULTS: ClassVar[dict[str, tuple[Any, ...]]] = {
        "tool_calls": ([],), "function_call": (), "audio": (), "tool_call_id": (),
    }

    role: str
    content: Content | None = None
    name: str | None = None
    refusal: str | None = None
    tool_calls: Any = None
    function_call: Any = None
    audio: Any = None
    tool_call_id: Any = None

    @field_validator("role")
    @classmethod
    def _known_role(cls, role: str) -> str:
        if role in ("tool", "function"):
            raise ValueError(f"{role!r} messages are not supported: this server does not "
                             "implement tool calling")
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        return role

    @model_validator(mode="after")
    def _has_content(self) -> ChatMessage:
        if self.content is None and self.role != "assistant":
            raise ValueError(f"a {self.role} message needs content")
        return self

    def for_template(self) -> dict[str, str]:
        """The message as chat templates expect it (developer messages become system)."""
        message = {"role": "system" if self.role == "developer" else self.role,
                   "content": joined_text(self.content or "")}
        if self.name is not None:
            message["name"] = self.name
        return message


class ChatTemplateFields(RequestModel):
    """How the conversation becomes a prompt (extras beyond the OpenAI API)."""

    add_generation_prompt: bool = True
    continue_final_message: bool = False
    """Continue the last (assistant) message instead of starting a new one."""
    chat_template_kwargs: dict[str, Any] | None = None


class ChatCompletionRequest(SamplingRequest, ChatTemplateFields):
    ACCEPTED_DEFAULTS: ClassVar[dict[str, tuple[Any, ...]]] = {
        "store": (False,), "service_tier": ("auto", "default"), "modalities": (["text"],),
        "tools": ([],), "tool_choice": ("none",),
        "parallel_tool_calls": (True, False), "functions": (), "function_call": ("none",),
        "audio": (), "prediction": (), "web_search_options": (), "reasoning_effort": (),
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
    tools: Any = None
    tool_choice: Any = None
    parallel_tool_calls: Any = None
    functions: Any = None
    function_call: Any = None
    audio: Any = None
    prediction: Any = None
    web_search_options: Any = None
    reasoning_effort: Any = None
    verbosity: Any = None
    moderation: Any = None
    prompt_cache_options: Any = None
    prompt_cache_retention: Any = None

    @model_validator(mode="after")
    def _check(self) -> ChatCompletionRequest:
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs set to true")
        return self

    @property
    def output_limit(self) -> int | None:
        """max_completion_tokens, else the deprecated max_tokens."""
        return self.max_completion_tokens if self.max_completion_tokens is not None \
            else self.max_tokens

    @property
    def num_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None
