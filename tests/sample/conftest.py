from __future__ import annotations

from collections.abc import Callable

import pytest

from pagoda.sample import SamplingState
from pagoda.sampling_params import SamplingParams


@pytest.fixture
def state() -> Callable[..., SamplingState]:
    """state(prompt=..., output=..., eos=..., **sampling_params) -> SamplingState."""

    def make(prompt: list[int] | None = None, output: list[int] | None = None,
             eos: int | None = None, **params) -> SamplingState:
        return SamplingState(SamplingParams(**params), list(prompt or [0]),
                             list(output or []), eos)

    return make
