"""What one request may ask for is bounded, with errors naming the field and the limit."""

from __future__ import annotations

import pytest

from pagoda import SamplingParams
from pagoda.sampling_params import (
    MAX_BAD_WORDS,
    MAX_LOGIT_BIAS_ENTRIES,
    MAX_N,
    MAX_STOP_CHARS,
    MAX_STOP_STRINGS,
    MAX_STOP_TOKEN_IDS,
)


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"n": MAX_N + 1}, "n must be an integer in [1, 128]"),
    ({"seed": 2**63}, "seed must be a signed 64-bit integer"),
    ({"seed": -(2**63) - 1}, "seed must be a signed 64-bit integer"),
    ({"stop": ["x"] * (MAX_STOP_STRINGS + 1)}, f"stop has {MAX_STOP_STRINGS + 1} entries"),
    ({"stop": "x" * (MAX_STOP_CHARS + 1)}, f"{MAX_STOP_CHARS + 1} characters"),
    ({"stop_token_ids": [1] * (MAX_STOP_TOKEN_IDS + 1)}, "stop_token_ids has"),
    ({"logit_bias": dict.fromkeys(range(MAX_LOGIT_BIAS_ENTRIES + 1), 1.0)}, "logit_bias has"),
    ({"bad_words": ["x"] * (MAX_BAD_WORDS + 1)}, "bad_words has"),
])
def test_over_a_limit_is_refused(kwargs: dict, says: str) -> None:
    with pytest.raises(ValueError) as raised:
        SamplingParams(**kwargs)
    assert says in str(raised.value) and len(str(raised.value)) < 200


def test_at_the_limits_is_accepted() -> None:
    SamplingParams(n=MAX_N, seed=2**63 - 1, stop=["x" * MAX_STOP_CHARS] * MAX_STOP_STRINGS,
                   stop_token_ids=[1] * MAX_STOP_TOKEN_IDS,
                   logit_bias=dict.fromkeys(range(MAX_LOGIT_BIAS_ENTRIES), 1.0),
                   bad_words=["x"] * MAX_BAD_WORDS)
    SamplingParams(seed=-(2**63))
