"""POST /v1/messages and /v1/messages/count_tokens request bodies (Anthropic Messages API)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field

from pagoda_server.protocol.common import RequestModel, joined_text, text_only


class TextBlock(RequestModel):
    ACCEPTED_DEFAULTS: ClassVar[dict[str, tuple[Any, ...]]] = {"citations": ([],)}

    type: Literal["text"]
    text: str
    cache_control: dict[str, Any] | None = None
    """Accepted: prefix caching is automatic."""
    citations: Any = None


Content = Annotated[str | list[TextBlock], BeforeValidator(text_only)]


class Message(RequestModel):
    role: Literal["user", "assistant"]
    content: Content


class CountTokensRequest(RequestModel):
    ACCEPTED_DEFAULTS: ClassVar[dict[str, tuple[Any, ...]]] = {
        "tools": ([],), "tool_choice": ({"type": "none"},), "thinking": ({"type": "disabled"},),
        "service_tier": ("auto", "standard_only"), "speed": ("standard",),
        "container": (), "mcp_servers": (), "output_config": (), "output_format": (),
        "diagnostics": (), "context_management": (),
    }

    model: str
    messages: list[Message] = Field(min_length=1)
    system: Content | None = None
    cache_control: dict[str, Any] | None = None
    """Accepted: prefix caching is automatic."""
    user_profile_id: str | None = None
    workspace_id: str | None = None
    """`user_profile_id`, `workspace_id`: accepted, unused."""
    tools: Any = None
    tool_choice: Any = None
    thinking: Any = None
    service_tier: Any = None
    speed: Any = None
    container: Any = None
    mcp_servers: Any = None
    output_config: Any = None
    output_format: Any = None
    diagnostics: Any = None
    context_management: Any = None

    def conversation(self) -> list[dict[str, str]]:
        """The system prompt and messages as chat-template messages."""
        messages = [{"role": m.role, "content": joined_text(m.content)} for m in self.messages]
        if self.system:
            messages.insert(0, {"role": "system", "content": joined_text(self.system)})
        return messages

    @property
    def prefill(self) -> bool:
        """A final assistant message is continued, not answered."""
        return self.messages[-1].role == "assistant"


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

    def sampling_kwargs(self) -> dict[str, Any]:
        kwargs = self.set_values(("temperature", "top_p", "top_k", "max_tokens"))
        if self.stop_sequences:
            kwargs["stop"] = self.stop_sequences
        return kwargs
