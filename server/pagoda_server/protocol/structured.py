"""`response_format` (OpenAI) and the `structured_outputs` extension: the grammar a
request's output must follow."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from pagoda_server.protocol.common import RequestModel


class JsonSchemaFormat(RequestModel):
    name: str = Field(max_length=64)
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    """The JSON schema (no schema: any JSON object)."""
    strict: bool | None = None
    """Accepted either way: the output always follows the schema exactly."""


class ResponseFormat(RequestModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_with_its_type(self) -> ResponseFormat:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ValueError("json_schema is required with type \"json_schema\", and only then")
        return self


class StructuredOutputsRequest(RequestModel):
    """Pagoda's (and vLLM's) extension: exactly one of these."""

    json_: dict[str, Any] | str | None = Field(None, alias="json")
    json_object: bool | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
