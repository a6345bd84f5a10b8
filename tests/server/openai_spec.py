"""Validate responses against the official OpenAI OpenAPI document's component schemas.

The document is OpenAPI 3.1 but still marks optional-null values with OpenAPI 3.0's
`nullable: true`, which JSON Schema ignores; it is rewritten to "or null", its intended
meaning. Documented deviations: a streamed /v1/completions chunk is a
CreateCompletionResponse (the spec says both share one shape) whose `finish_reason` is
null until the choice ends, as OpenAI's own API streams it; an embedding asked for with
`encoding_format: base64` is a string (the spec lists only the float array), as OpenAI's
own API returns it.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

SPEC = Path("/work/shared/specs/openai-openapi.yaml")
COMPLETION_CHUNK = "CreateCompletionResponse (stream chunk)"
EMBEDDING_BASE64 = "CreateEmbeddingResponse (base64)"


def _with_nullable(node: Any) -> Any:
    if isinstance(node, list):
        return [_with_nullable(n) for n in node]
    if not isinstance(node, dict):
        return node
    node = {k: _with_nullable(v) for k, v in node.items()}
    if node.pop("nullable", False) is True:
        return {"anyOf": [node, {"type": "null"}]}
    return node


@cache
def spec() -> dict[str, Any]:
    with SPEC.open() as f:
        document = _with_nullable(yaml.load(f, Loader=yaml.CSafeLoader))
    schemas = document["components"]["schemas"]
    chunk = copy.deepcopy(schemas["CreateCompletionResponse"])
    finish = chunk["properties"]["choices"]["items"]["properties"]["finish_reason"]
    chunk["properties"]["choices"]["items"]["properties"]["finish_reason"] = {
        "anyOf": [finish, {"type": "null"}]}
    schemas[COMPLETION_CHUNK] = chunk
    base64 = copy.deepcopy(schemas["CreateEmbeddingResponse"])
    item = copy.deepcopy(schemas["Embedding"])
    item["properties"]["embedding"] = {"type": "string", "contentEncoding": "base64"}
    base64["properties"]["data"]["items"] = item
    schemas[EMBEDDING_BASE64] = base64
    return document


@cache
def _validator(name: str) -> jsonschema.protocols.Validator:
    document = spec()
    assert name in document["components"]["schemas"], name
    root = {**document, "$ref": f"#/components/schemas/{name}"}
    return jsonschema.Draft202012Validator(root)


def validate(name: str, instance: Any) -> None:
    """Raise jsonschema.ValidationError unless `instance` matches component schema `name`."""
    _validator(name).validate(instance)


def request_fields(name: str) -> set[str]:
    """Every property of a request schema, following allOf and $ref."""
    schemas = spec()["components"]["schemas"]
    fields: set[str] = set()

    def walk(schema: dict[str, Any]) -> None:
        if "$ref" in schema:
            walk(schemas[schema["$ref"].rsplit("/", 1)[-1]])
        for part in schema.get("allOf", []):
            walk(part)
        fields.update(schema.get("properties", {}))

    walk(schemas[name])
    return fields
