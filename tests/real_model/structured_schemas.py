"""JSON schemas the SmolLM2 structured-output tests ask for, each with a prompt."""

from __future__ import annotations

SCHEMAS = {
    "nested": ("Describe a person who lives in a city, as JSON.", {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 24},
            "address": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 24},
                               "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["city", "zip"],
            },
        },
        "required": ["name", "address"],
    }),
    "enum": ("What color is the sky on a clear day? Answer in JSON.", {
        "type": "object",
        "properties": {"color": {"enum": ["red", "green", "blue"]},
                       "sure": {"type": "boolean"}},
        "required": ["color", "sure"],
    }),
    "array": ("List a few fruits as JSON.", {
        "type": "object",
        "properties": {"fruits": {"type": "array", "items": {"type": "string", "maxLength": 16},
                                  "minItems": 2, "maxItems": 4}},
        "required": ["fruits"],
    }),
    "numbers": ("Give today's weather in Paris as JSON.", {
        "type": "object",
        "properties": {"temperature": {"type": "number", "minimum": -50, "maximum": 60},
                       "humidity": {"type": "integer", "minimum": 0, "maximum": 100}},
        "required": ["temperature", "humidity"],
    }),
}
