"""SamplingParams for a request: its fields over the model's generation_config defaults."""

from __future__ import annotations

from typing import Any

from pagoda.sampling_params import SamplingParams
from pagoda_server.errors import bad_request, error_param
from pagoda_server.state import ServerState

PARAM_NAMES = set(SamplingParams.__dataclass_fields__) | {"prompt"}
"""Fields an engine or SamplingParams error message may start with."""


def build_params(state: ServerState, fields: dict[str, Any]) -> SamplingParams:
    """`fields` are SamplingParams arguments the client set; invalid values answer 400."""
    try:
        return SamplingParams(**{**state.engine.generation_defaults, **fields})
    except (ValueError, TypeError) as exc:
        raise bad_request(str(exc), error_param(str(exc), PARAM_NAMES)) from None
