"""StepOutputs crosses the pipe as a table of plain values and comes back as the same
EngineCoreOutputs."""

from __future__ import annotations

import multiprocessing
import pickle
from multiprocessing.reduction import ForkingPickler

from pagoda.engine.core import EngineStats
from pagoda.engine.core_process import StepOutputs
from pagoda.engine.scheduler_output import EngineCoreOutput, TokenLogprobs


def _message() -> StepOutputs:
    lp = TokenLogprobs([7, 3, 9], [-0.25, -1.5, -2.0], 2)
    return StepOutputs([
        EngineCoreOutput("a", [5]),
        EngineCoreOutput("b", [6], new_logprobs=[lp], num_cached_tokens=32),
        EngineCoreOutput("c", [], new_prompt_logprobs=[lp, TokenLogprobs([1], [-0.5], 1)]),
        EngineCoreOutput("d", [8], finish_reason="stop", stop_reason=8),
        EngineCoreOutput("e#1", [2], new_logprobs=[lp], new_prompt_logprobs=[lp],
                         finish_reason="length"),
    ], EngineStats(4, 1, 0.25, 10, 3, 0))


def test_round_trip_gives_equal_outputs():
    message = _message()
    copy = pickle.loads(ForkingPickler.dumps(message))
    assert copy == message
    assert all(type(out) is EngineCoreOutput for out in copy.outputs)
    assert all(type(lp) is TokenLogprobs for out in copy.outputs
               for lp in out.new_logprobs + out.new_prompt_logprobs)
    assert copy.outputs[0].new_logprobs is not copy.outputs[0].new_prompt_logprobs


def test_through_a_pipe():
    here, there = multiprocessing.Pipe()
    here.send(_message())
    assert there.recv() == _message()
