"""StepOutputs crosses the pipe as a table of plain values and comes back as the same
EngineCoreOutputs."""

from __future__ import annotations

import multiprocessing
import pickle
from multiprocessing.reduction import ForkingPickler

from pagoda.engine.messages import StepOutputs
from pagoda.engine.scheduler_output import EngineCoreOutput
from pagoda.outputs import EngineStats, TokenLogprobs


def _message() -> StepOutputs:
    lp = TokenLogprobs([7, 3, 9], [-0.25, -1.5, -2.0], 2)
    return StepOutputs([
        EngineCoreOutput("a", [5]),
        EngineCoreOutput("b", [6], new_logprobs=[lp], num_cached_tokens=32),
        EngineCoreOutput("c", [], new_prompt_logprobs=[lp, TokenLogprobs([1], [-0.5], 1)]),
        EngineCoreOutput("d", [8], finish_reason="stop", stop_reason=8),
        EngineCoreOutput("e#1", [2], new_logprobs=[lp], new_prompt_logprobs=[lp],
                         finish_reason="length"),
        EngineCoreOutput("f", [], finish_reason="stop", num_cached_tokens=16,
                         pooled=[0.125, -2.5, 1e-3]),  # a pooling request's output
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


def test_the_reader_merges_waiting_steps_and_keeps_their_order():
    """Steps already waiting in the pipe are taken in one pass, consecutive ones merged;
    other messages keep their place between them."""
    from pagoda.engine.messages import UtilityResult
    from pagoda.frontend.core_client import EngineCoreClient

    here, there = multiprocessing.Pipe()
    client = EngineCoreClient.__new__(EngineCoreClient)  # its reader's pipe, no process
    client._conn = here
    stats = [EngineStats(i, 0, 0.0, 0, 0, 0) for i in range(4)]
    for i in range(3):
        there.send(StepOutputs([EngineCoreOutput("a", [i]), EngineCoreOutput("b", [10 + i])],
                               stats[i]))
    there.send(UtilityResult(7, "value"))
    there.send(StepOutputs([EngineCoreOutput("a", [3])], stats[3]))
    first, result, last = client._receive_waiting()
    assert [(o.request_id, o.new_token_ids) for o in first.outputs] == [
        ("a", [0]), ("b", [10]), ("a", [1]), ("b", [11]), ("a", [2]), ("b", [12])]
    assert first.stats == stats[2]  # the newest snapshot
    assert (result.call_id, result.value) == (7, "value")
    assert [o.new_token_ids for o in last.outputs] == [[3]] and last.stats == stats[3]
    assert not here.poll()
