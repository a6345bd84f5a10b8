"""POST /tokenize and /detokenize request bodies (Pagoda's own, vLLM-compatible)."""

from __future__ import annotations

from pydantic import model_validator

from pagoda_server.protocol.chat import ChatMessage, ChatTemplateFields
from pagoda_server.protocol.common import RequestModel
from pagoda_server.protocol.tools import ChatTool


class TokenizeRequest(ChatTemplateFields):
    """Text (`prompt`) or a conversation (`messages`, through the chat template)."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    tools: list[ChatTool] | None = None
    """With messages: the tools the prompt offers."""
    add_special_tokens: bool = True

    @model_validator(mode="after")
    def _one_input(self) -> TokenizeRequest:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("send exactly one of prompt and messages")
        return self


class DetokenizeRequest(RequestModel):
    model: str | None = None
    tokens: list[int]
