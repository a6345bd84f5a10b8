"""What every request model shares: strict parsing and the rule for spec fields we lack."""

from __future__ import annotations

import json
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


class RequestModel(BaseModel):
    """A request body. Unknown fields are errors and JSON types are not coerced.

    `ACCEPTED_DEFAULTS` lists fields of the public API this server does not implement,
    with the values that are harmless to accept (null always is); any other value is
    rejected with a message naming the field.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    ACCEPTED_DEFAULTS: ClassVar[dict[str, tuple[Any, ...]]] = {}

    @field_validator("*")
    @classmethod
    def _reject_unsupported(cls, value: Any, info: ValidationInfo) -> Any:
        allowed = cls.ACCEPTED_DEFAULTS.get(info.field_name or "")
        if allowed is None or value is None or any(_same(value, a) for a in allowed):
            return value
        hint = f" (accepted: {', '.join(json.dumps(v) for v in allowed)})" if allowed else ""
        raise ValueError(f"{info.field_name} is not supported by this server{hint}")

    def set_values(self, names: tuple[str, ...]) -> dict[str, Any]:
        """The fields among `names` that the client set to a non-null value."""
        return {n: getattr(self, n) for n in names
                if n in self.model_fields_set and getattr(self, n) is not None}


def _same(a: Any, b: Any) -> bool:
    """JSON equality: `1` is not `true`."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def text_only(value: Any) -> Any:
    """Reject content parts other than text with a message naming the part and its type."""
    if isinstance(value, list):
        for i, part in enumerate(value):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            if kind != "text":
                raise ValueError(f"content[{i}] is of type {kind!r}: this server accepts "
                                 "text content only")
    return value


def joined_text(content: str | list[Any]) -> str:
    """Message content as one string: text parts joined by newlines."""
    if isinstance(content, str):
        return content
    return "\n".join(part.text for part in content)
