"""Small builders for engine unit tests."""

from __future__ import annotations

import itertools

from pagoda.engine.request import Request
from pagoda.sampling_params import SamplingParams

_clock = itertools.count()


def make_request(request_id: str, prompt: list[int], max_tokens: int = 8, priority: int = 0,
                 **params) -> Request:
    """A request with a strictly increasing arrival time (FCFS order = creation order)."""
    return Request(
        request_id=request_id,
        prompt_token_ids=list(prompt),
        sampling_params=SamplingParams(max_tokens=max_tokens, **params),
        max_tokens=max_tokens,
        eos_token_id=0,
        arrival_time=float(next(_clock)),
        priority=priority,
    )
