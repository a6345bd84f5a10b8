"""Overlapped steps: step N+1 scheduled before step N's tokens reach the host.

The CPU runs synchronously, so the engine only overlaps there when asked; the scheduling
logic is the same as on a GPU: placeholders for tokens in flight, one wasted token for a
request that turns out finished, nothing lost on preemption or abort.
"""

from __future__ import annotations

import random

import pytest

from pagoda import LLM, SamplingParams
from pagoda.config import SchedulerConfig
from pagoda.engine.kv_cache_manager import KVCacheManager
from pagoda.engine.request import PLACEHOLDER_TOKEN_ID
from pagoda.engine.scheduler import Scheduler
from pagoda.engine.scheduler_output import ModelRunnerOutput
from tests.engine.helpers import make_request
from tests.engine.tiny_models import VOCAB, hf_greedy, make_checkpoint, tiny_configs

NEW_TOKENS = 12
rng = random.Random(7)
PROMPTS = [[rng.randrange(3, VOCAB) for _ in range(n)] for n in (3, 17, 9, 30, 1, 12)]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = make_checkpoint(tmp_path_factory.mktemp("llama"), tiny_configs()["llama"])
    return path, hf_greedy(path, PROMPTS, NEW_TOKENS)


def _llm(path, overlap: bool, **options) -> LLM:
    options = {"num_kv_blocks": 256, "block_size": 4} | options
    llm = LLM(str(path), dtype="float32", device="cpu", async_scheduling=overlap, **options)
    assert llm.engine.core.async_scheduling is overlap
    return llm


def _run(llm: LLM, params: SamplingParams | list[SamplingParams]) -> list[list[int]]:
    outs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], params, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outs]


GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)


@pytest.mark.parametrize("options", [
    {},
    {"max_num_batched_tokens": 8},  # chunked prefill
    {"num_kv_blocks": 14},  # preemption
    {"max_num_seqs": 2},
])
def test_greedy_matches_hf(checkpoint, options):
    path, expected = checkpoint
    llm = _llm(path, True, **options)
    assert _run(llm, GREEDY) == expected
    stats = llm.engine.core.stats()
    assert stats.kv_cache_usage == 0.0  # every block back in the pool
    assert not llm.engine.core.has_unfinished_requests()
    if options.get("num_kv_blocks") == 14:
        assert stats.num_preemptions > 0


def test_stops_exactly_where_sync_scheduling_stops(checkpoint):
    """A request that stops on a token in flight had a step scheduled already; its extra
    token must not appear."""
    path, expected = checkpoint
    # Stop on each prompt's 5th greedy token: one id per prompt, as a stop token.
    params = [SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, stop_token_ids=[out[4]])
              for out in expected]
    sync, overlap = _run(_llm(path, False), params), _run(_llm(path, True), params)
    assert overlap == sync
    assert all(len(out) <= 5 for out in overlap)
    lengths = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in
               (1, 2, 3, 5, 8, 13)]
    assert [len(t) for t in _run(_llm(path, True), lengths)] == [1, 2, 3, 5, 8, 13]


@pytest.mark.parametrize("params", [
    SamplingParams(temperature=0.8, top_p=0.9, seed=11, max_tokens=NEW_TOKENS, ignore_eos=True),
    SamplingParams(temperature=0.7, seed=3, min_tokens=4, max_tokens=NEW_TOKENS),
    SamplingParams(temperature=0.0, repetition_penalty=1.3, frequency_penalty=0.5,
                   max_tokens=NEW_TOKENS, ignore_eos=True),
    SamplingParams(temperature=1.0, seed=5, presence_penalty=1.0, bad_words=["w7 w9"],
                   max_tokens=NEW_TOKENS, ignore_eos=True),
])
def test_sampling_is_unchanged_by_overlap(checkpoint, params):
    """Seeded draws, min_tokens, penalties and bad words see the same tokens either way."""
    path, _ = checkpoint
    assert _run(_llm(path, True), params) == _run(_llm(path, False), params)


def test_scheduler_decodes_a_token_in_flight_with_a_placeholder():
    sched = Scheduler(SchedulerConfig(8, 64), KVCacheManager(32, 4), max_model_len=256)
    req = make_request("a", [5, 6, 7], max_tokens=8)
    sched.add_request(req)
    first = sched.schedule()  # prefill; its token is in flight
    second = sched.schedule()  # scheduled before the first result arrives
    (item,) = second.scheduled
    assert item.num_computed_tokens == 3 and item.token_ids == [PLACEHOLDER_TOKEN_ID]
    assert item.sample and req.num_inflight_tokens == 2
    (out,) = sched.update_from_output(first, ModelRunnerOutput(sampled={"a": 9}))
    assert out.new_token_ids == [9] and req.num_inflight_tokens == 1
    third = sched.schedule()
    assert third.scheduled[0].token_ids == [PLACEHOLDER_TOKEN_ID]
    (out,) = sched.update_from_output(second, ModelRunnerOutput(sampled={"a": 0}))  # eos
    assert out.finish_reason == "stop" and req.output_token_ids == [9, 0]
    assert sched.kv_cache.usage == 0.0 and not sched.has_unfinished_requests()
    # The step already scheduled for it computed a token nobody hears about.
    assert sched.update_from_output(third, ModelRunnerOutput(sampled={"a": 4})) == []
    assert req.output_token_ids == [9, 0]


def test_scheduler_stops_scheduling_when_the_tokens_in_flight_are_the_last():
    sched = Scheduler(SchedulerConfig(8, 64), KVCacheManager(32, 4), max_model_len=256)
    sched.add_request(make_request("a", [5, 6, 7], max_tokens=2))
    first, second = sched.schedule(), sched.schedule()
    assert second.scheduled and sched.schedule().scheduled == []
    sched.update_from_output(first, ModelRunnerOutput(sampled={"a": 9}))
    (out,) = sched.update_from_output(second, ModelRunnerOutput(sampled={"a": 8}))
    assert out.finish_reason == "length" and sched.kv_cache.usage == 0.0


def test_preempted_request_keeps_its_token_in_flight():
    sched = Scheduler(SchedulerConfig(8, 64), KVCacheManager(3, 4), max_model_len=256)
    a, b = make_request("a", [5, 6, 7, 8], max_tokens=8), make_request("b", [1, 2, 3], max_tokens=8)
    sched.add_request(a)
    sched.add_request(b)
    first = sched.schedule()  # a: 4 tokens (1 block), b: 3 tokens (1 block)
    second = sched.schedule()  # a needs a 2nd block (the last free one); b fits its block
    third_blocks_needed = sched.schedule()  # b needs a new block: the newest (b) is preempted
    assert sched.num_preemptions == 1 and b.num_computed_tokens == 0
    sched.update_from_output(first, ModelRunnerOutput(sampled={"a": 10, "b": 11}))
    assert b.output_token_ids == [11]  # the token sampled before preemption is kept
    assert [s.request_id for s in second.scheduled] == ["a", "b"]
    assert [s.request_id for s in third_blocks_needed.scheduled] == ["a"]
