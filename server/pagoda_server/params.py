"""SamplingParams for a request: its fields over the model's generation_config defaults."""

from __future__ import annotations

import re
from typing import Any

from pagoda.sampling_params import SamplingParams
from pagoda.structured import StructuredOutputsParams
from pagoda_server.errors import bad_request, error_param
from pagoda_server.protocol.sampling import SamplingRequest
from pagoda_server.state import ServerState

PARAM_NAMES = set(SamplingParams.__dataclass_fields__) | {"prompt"}
"""Fields an engine or SamplingParams error message may start with."""


def build_params(state: ServerState, fields: dict[str, Any]) -> SamplingParams:
    """`fields` are SamplingParams arguments the client set; invalid values answer 400."""
    try:
        return SamplingParams(**{**state.engine.generation_defaults, **fields})
    except (ValueError, TypeError) as exc:
        raise bad_request(str(exc), error_param(str(exc), PARAM_NAMES)) from None


def structured_outputs(body: SamplingRequest) -> StructuredOutputsParams | None:
    """The grammar `response_format` or `structured_outputs` asks for, checked by the grammar
    engine: an invalid or unenforceable one answers 400 naming the field."""
    fmt, extension = body.response_format, body.structured_outputs
    constrains = fmt is not None and fmt.type != "text"
    if constrains and extension is not None:
        raise bad_request("response_format and structured_outputs both constrain the output: "
                          "set only one", "structured_outputs")
    if extension is not None:
        field, kwargs = "structured_outputs", {
            "json": extension.json_, "json_object": extension.json_object,
            "regex": extension.regex, "choice": extension.choice, "grammar": extension.grammar}
    elif not constrains:
        return None
    else:
        assert fmt is not None
        schema = fmt.json_schema.schema_ if fmt.json_schema is not None else None
        field = "response_format.json_schema" if fmt.type == "json_schema" else "response_format"
        kwargs = {"json": schema} if schema is not None else {"json_object": True}
    try:
        from pagoda.structured.check import check

        params = StructuredOutputsParams(**kwargs)
        check(params)
    except ValueError as exc:
        message = str(exc)
        if field != "structured_outputs":
            message = re.sub(r"^structured_outputs(\.json)?", field, message)
        param = re.match(r"[\w.]+", message)
        raise bad_request(message, param.group(0) if param else field) from None
    return params
