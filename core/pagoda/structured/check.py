"""Validate a grammar before a request reaches the engine core, so bad input fails at once
(an HTTP 400 in the server) with a message naming the field."""

from __future__ import annotations

import functools
import json
from typing import Any

from pagoda.structured.params import StructuredOutputsParams

UNSUPPORTED_KEYWORDS = {
    "uniqueItems": "unique array items",
    "contains": "arrays that must contain a match",
    "minContains": "arrays that must contain a match",
    "maxContains": "arrays that must contain a match",
    "propertyNames": "constraints on property names",
    "dependentRequired": "dependent properties",
    "dependentSchemas": "dependent schemas",
    "dependencies": "dependent properties",
    "if": "conditional schemas",
    "then": "conditional schemas",
    "else": "conditional schemas",
    "not": "negated schemas",
}
"""JSON-schema keywords the grammar engine (xgrammar) would ignore: rejected rather than
silently not enforced."""

_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_VALUES = ("items", "additionalProperties", "unevaluatedProperties", "additionalItems",
                  "unevaluatedItems")


def unsupported_feature(schema: Any, path: str = "") -> str | None:
    """The first keyword of `schema` (walking its subschemas) that the grammar could not
    enforce, as "path: keyword (what it means)", or None."""
    if not isinstance(schema, dict):
        return None
    for keyword, meaning in UNSUPPORTED_KEYWORDS.items():
        if keyword in schema:
            return f"{path or '/'}: {keyword} ({meaning})"
    if "multipleOf" in schema and schema.get("type") != "integer":
        return f"{path or '/'}: multipleOf on non-integers"
    children: list[tuple[str, Any]] = []
    for key in _SCHEMA_MAPS:
        if isinstance(schema.get(key), dict):
            children += [(f"{path}/{key}/{name}", sub) for name, sub in schema[key].items()]
    for key in _SCHEMA_LISTS:
        if isinstance(schema.get(key), list):
            children += [(f"{path}/{key}/{i}", sub) for i, sub in enumerate(schema[key])]
    for key in _SCHEMA_VALUES:
        value = schema.get(key)
        if isinstance(value, list):
            children += [(f"{path}/{key}/{i}", sub) for i, sub in enumerate(value)]
        elif value is not None:
            children.append((f"{path}/{key}", value))
    for child_path, child in children:
        found = unsupported_feature(child, child_path)
        if found:
            return found
    return None


def tag_unsupported_feature(tag: Any, path: str = "") -> str | None:
    """`unsupported_feature` of each JSON schema inside a structural tag (the `json_schema`
    of its formats, at any depth), with the path through the tag."""
    if isinstance(tag, dict):
        if "json_schema" in tag:
            return unsupported_feature(tag["json_schema"], f"{path}/json_schema")
        items = list(tag.items())
    elif isinstance(tag, list):
        items = list(enumerate(tag))
    else:
        return None
    for key, value in items:
        found = tag_unsupported_feature(value, f"{path}/{key}")
        if found:
            return found
    return None


def xgrammar() -> Any:
    """The grammar engine's module, or an ImportError saying how to install it."""
    try:
        import xgrammar as xgr
    except ImportError as exc:
        raise ImportError("structured outputs need xgrammar: pip install "
                          "'pagoda[structured]'") from exc
    return xgr


@functools.lru_cache(maxsize=256)
def _check(kind: str, spec: str) -> None:
    xgr = xgrammar()

    find = {"json": unsupported_feature, "structural_tag": tag_unsupported_feature}.get(kind)
    reason = find(json.loads(spec)) if find else None
    if reason:
        raise ValueError(f"structured_outputs.{kind} uses a JSON-schema feature that "
                         f"cannot be enforced: {reason}")
    build = {"json": lambda: xgr.Grammar.from_json_schema(spec),
             "regex": lambda: xgr.Grammar.from_regex(spec),
             "grammar": lambda: xgr.Grammar.from_ebnf(spec),
             "structural_tag": lambda: xgr.Grammar.from_structural_tag(spec)}[kind]
    what = {"json": "JSON schema", "regex": "regular expression", "grammar": "EBNF grammar",
            "structural_tag": "structural tag"}
    try:
        build()
    except RuntimeError as exc:
        detail = str(exc).strip().splitlines()[0]
        detail = detail.split(": ", 1)[-1] if "/project/" in detail else detail
        raise ValueError(f"structured_outputs.{kind} is not a valid {what[kind]}: "
                         f"{detail}") from None


def check(params: StructuredOutputsParams) -> None:
    """Raise ValueError (naming the field) unless the grammar engine accepts the grammar and
    enforces all of it. Cached by grammar, so checking a schema seen before is free."""
    _check(*params.key)
