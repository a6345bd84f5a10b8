"""The tool fields of a chat completion request (OpenAI)."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field, field_validator

from pagoda.tools import FunctionTool, ToolCall
from pagoda_server.protocol.common import RequestModel


class FunctionDefinition(RequestModel):
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    """The arguments' JSON schema (an object); none: any object."""
    strict: bool | None = None
    """Accepted either way: forced calls always follow the schema exactly."""

    @field_validator("parameters")
    @classmethod
    def _an_object_schema(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        if schema is not None and schema.get("type", "object") != "object":
            raise ValueError("must be the JSON schema of an object (\"type\": \"object\")")
        return schema

    def tool(self) -> FunctionTool:
        return FunctionTool(self.name, self.description, self.parameters, self.strict)


class ChatTool(RequestModel):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(RequestModel):
    name: str


class NamedToolChoice(RequestModel):
    type: Literal["function"]
    function: NamedFunction


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class CalledFunction(RequestModel):
    name: str
    arguments: str
    """The arguments object as JSON text."""

    @field_validator("arguments")
    @classmethod
    def _json_object(cls, arguments: str) -> str:
        try:
            value = json.loads(arguments)
        except ValueError as exc:
            raise ValueError(f"is not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ValueError("must be a JSON object")
        return arguments


class ToolCallParam(RequestModel):
    """An earlier call, in an assistant message."""

    id: str
    type: Literal["function"]
    function: CalledFunction

    def call(self) -> ToolCall:
        return ToolCall(self.function.name, self.function.arguments, self.id)
