"""StructuredOutputsParams: which grammar a request's output must follow (vLLM-compatible
field names)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

ANY_OBJECT = '{"type": "object"}'
"""`json_object`'s schema: any JSON object (not an array or a scalar)."""

KINDS = ("json", "json_object", "regex", "choice", "grammar", "structural_tag")
"""The fields of `StructuredOutputsParams` that each name a kind of grammar."""


def _fail(name: str, allowed: str, value: object) -> None:
    raise ValueError(f"structured_outputs.{name} must be {allowed}, got {value!r}")


@dataclass(frozen=True)
class StructuredOutputsParams:
    """Exactly one of: `json` (a JSON schema, as a dict or its JSON text), `json_object`
    (True: any JSON object), `regex`, `choice` (one of these strings, verbatim) or
    `grammar` (EBNF, GBNF style, with a `root` rule) or `structural_tag` (an xgrammar
    structural tag, `{"type": "structural_tag", "format": {...}}`, as a dict or its JSON
    text: formats such as tags, JSON schemas and free text in sequence). Invalid values raise ValueError
    naming the field; whether the grammar itself is valid is `pagoda.structured.check`'s
    to say (it needs the grammar engine)."""

    json: dict[str, Any] | str | None = None
    json_object: bool | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    structural_tag: dict[str, Any] | str | None = None

    def __post_init__(self) -> None:
        given = [k for k in KINDS if getattr(self, k) not in (None, False)]
        if len(given) != 1:
            raise ValueError("structured_outputs must set exactly one of "
                             f"{', '.join(KINDS)}; got {', '.join(given) or 'none'}")
        if isinstance(self.json, str):
            try:
                schema = json.loads(self.json)
            except ValueError as exc:
                raise ValueError(f"structured_outputs.json is not valid JSON: {exc}") from None
            if not isinstance(schema, (dict, bool)):
                _fail("json", "a JSON schema (an object)", self.json)
        elif self.json is not None and not isinstance(self.json, dict):
            _fail("json", "a JSON schema (a dict or its JSON text)", self.json)
        if isinstance(self.structural_tag, str):
            try:
                tag = json.loads(self.structural_tag)
            except ValueError as exc:
                raise ValueError(f"structured_outputs.structural_tag is not valid JSON: "
                                 f"{exc}") from None
            if not isinstance(tag, dict):
                _fail("structural_tag", "a structural tag (an object)", self.structural_tag)
        elif self.structural_tag is not None and not isinstance(self.structural_tag, dict):
            _fail("structural_tag", "a structural tag (a dict or its JSON text)",
                  self.structural_tag)
        if self.json_object not in (None, True, False):
            _fail("json_object", "true", self.json_object)
        for name in ("regex", "grammar"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                _fail(name, "a non-empty string", value)
        if self.choice is not None and (
            not isinstance(self.choice, (list, tuple)) or not self.choice
            or not all(isinstance(c, str) and c for c in self.choice)
        ):
            _fail("choice", "a non-empty list of non-empty strings", self.choice)

    @property
    def kind(self) -> str:
        """The field that is set (one of `KINDS`)."""
        return next(k for k in KINDS if getattr(self, k) not in (None, False))

    @property
    def spec(self) -> str:
        """The grammar as one string: a JSON schema's text (`json_object`: any object's
        schema), the regex, the EBNF (a choice becomes EBNF), a structural tag's JSON text
        (canonical: sorted keys, so equal tags share one compiled grammar)."""
        kind = self.kind
        if kind == "structural_tag":
            tag = self.structural_tag
            return json.dumps(json.loads(tag) if isinstance(tag, str) else tag, sort_keys=True)
        if kind == "json":
            return self.json if isinstance(self.json, str) else json.dumps(self.json)
        if kind == "json_object":
            return ANY_OBJECT
        if kind == "choice":
            assert self.choice is not None
            return "root ::= " + " | ".join(_ebnf_literal(c) for c in self.choice)
        return str(getattr(self, kind))

    @property
    def key(self) -> tuple[str, str]:
        """(kind, spec) as compiled: "json", "regex", "grammar" or "structural_tag" (a
        choice becomes EBNF,
        `json_object` the schema of any object)."""
        compiled_as = {"json_object": "json", "choice": "grammar"}
        return compiled_as.get(self.kind, self.kind), self.spec


def _ebnf_literal(text: str) -> str:
    """`text` as an EBNF string literal (JSON's escapes, which the EBNF parser reads)."""
    return json.dumps(text, ensure_ascii=False)
