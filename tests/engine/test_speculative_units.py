"""Speculative decoding's parts on their own: the n-gram proposer, the verification rule,
which requests speculate, the config's checks, and the scheduler's handling of drafts
(steps of 1 + k tokens, tokens appended one by one with their stop checks, rejected
drafts' positions computed again and their blocks freed)."""

from __future__ import annotations

import random

import pytest

from pagoda.config import EngineConfig, SchedulerConfig, SpeculativeConfig
from pagoda.engine.kv_cache_manager import KVCacheManager
from pagoda.engine.request import RequestStatus
from pagoda.engine.scheduler import Scheduler
from pagoda.engine.scheduler_output import ModelRunnerOutput
from pagoda.sampling_params import SamplingParams
from pagoda.spec import NgramProposer, accepted_tokens, can_speculate
from tests.engine.helpers import make_request

BS = 4


@pytest.mark.parametrize(("tokens", "k", "min_n", "max_n", "want"), [
    ([1, 2, 3, 4, 1, 2], 3, 1, 3, [3, 4, 1]),  # "1 2" recurs: what followed it
    ([1, 2, 3, 1, 2, 4, 1, 2], 3, 1, 2, [4, 1, 2]),  # the latest occurrence wins
    ([1, 2, 7, 0, 2, 8, 1, 2], 3, 1, 2, [7, 0, 2]),  # the longer n-gram first
    ([1, 2, 7, 0, 2, 8, 1, 2], 3, 1, 1, [8, 1, 2]),  # ... else the latest "2"
    ([1, 2, 1], 3, 1, 3, [2, 1]),  # fewer than k follow the match
    ([1, 2, 3, 1], 3, 2, 3, []),  # only a 1-gram recurs, below min_n
    ([5, 6, 7, 8], 3, 1, 3, []),  # nothing recurs
    ([5], 3, 1, 3, []),
])
def test_ngram_proposals(tokens, k, min_n, max_n, want):
    assert NgramProposer(k, min_n, max_n).propose(tokens) == want


def test_ngram_proposals_are_capped_by_the_limit():
    proposer = NgramProposer(3, 1, 3)
    assert proposer.propose([1, 2, 3, 4, 1], limit=2) == [2, 3]
    assert proposer.propose([1, 2, 3, 4, 1], limit=0) == []


def _latest_earlier_match(tokens: list[int], k: int, min_n: int, max_n: int) -> list[int]:
    """The proposal by its definition, one comparison at a time."""
    for n in range(min(max_n, len(tokens) - 1), min_n - 1, -1):
        for start in range(len(tokens) - 1 - n, -1, -1):
            if tokens[start:start + n] == tokens[-n:]:
                return tokens[start + n:start + n + k]
    return []


@pytest.mark.parametrize("alphabet", [
    [3, 4, 5],
    # Ids sharing bytes, so the 4-byte words match at offsets that straddle two tokens.
    [0, 1, 256, 257, 65536, 16777216, 2**31 - 1, 16843009],
])
def test_ngram_proposals_of_a_growing_request_match_their_definition(alphabet):
    """A request's tokens grow step by step (by one token or several, as accepted drafts
    add): every proposal is the one a fresh search of all its tokens gives."""
    rng = random.Random(len(alphabet))
    proposer, owner = NgramProposer(4, 1, 3), make_request("r", [0])
    tokens = [rng.choice(alphabet) for _ in range(2)]
    while len(tokens) < 300:
        want = _latest_earlier_match(tokens, 4, 1, 3)
        assert proposer.propose(tokens, owner=owner) == want
        assert NgramProposer(4, 1, 3).propose(tokens) == want
        tokens += [rng.choice(alphabet) for _ in range(rng.randint(1, 4))]


def test_ngram_owners_tokens_start_over_if_they_shrink():
    proposer, owner = NgramProposer(2, 1, 2), make_request("r", [0])
    assert proposer.propose([1, 2, 3, 1], owner=owner) == [2, 3]
    assert proposer.propose([7, 8, 7], owner=owner) == [8, 7]


@pytest.mark.parametrize(("sampled", "drafts", "want"), [
    ([4, 5, 6, 9], [4, 5, 6], [4, 5, 6, 9]),  # all accepted, then the bonus token
    ([4, 7, 6, 9], [4, 5, 6], [4, 7]),  # the first mismatch is the last token
    ([8, 5, 6, 9], [4, 5, 6], [8]),
    ([3], [], [3]),
])
def test_accepted_tokens(sampled, drafts, want):
    assert accepted_tokens(sampled, drafts) == want


def test_which_requests_speculate():
    assert can_speculate(SamplingParams(temperature=0.0))
    assert can_speculate(SamplingParams(temperature=1.0, top_k=4, min_tokens=3, seed=1))
    assert not can_speculate(None)  # pooling
    assert not can_speculate(SamplingParams(repetition_penalty=1.2))
    assert not can_speculate(SamplingParams(logprobs=2))
    assert not can_speculate(SamplingParams(thinking_budget=4))


def test_config_checks_name_the_field():
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        SpeculativeConfig("ngram", num_speculative_tokens=0)
    with pytest.raises(ValueError, match="prompt_lookup_min and prompt_lookup_max"):
        SpeculativeConfig("ngram", prompt_lookup_min=3, prompt_lookup_max=2)
    with pytest.raises(ValueError, match="speculative_method must be one of"):
        SpeculativeConfig("eagle")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="speculative_method: a pooling model"):
        EngineConfig.from_kwargs(speculative_method="ngram", runner="pooling", device="cpu")
    with pytest.raises(ValueError, match="speculative_disable_by_batch_size must be >= 1"):
        SpeculativeConfig("ngram", speculative_disable_by_batch_size=0)
    with pytest.raises(ValueError, match="speculative_disable_by_batch_size .* needs "
                                         "speculative_method"):
        SpeculativeConfig(speculative_disable_by_batch_size=4)


def _scheduler(num_blocks: int = 32, budget: int = 64, **options) -> Scheduler:
    return Scheduler(SchedulerConfig(8, budget), KVCacheManager(num_blocks, BS, True),
                     max_model_len=1024, proposer=NgramProposer(3, 1, 2), **options)


def _speculative(prompt: list[int], max_tokens: int = 16, request_id: str = "a", **params):
    request = make_request(request_id, prompt, max_tokens=max_tokens, **params)
    request.speculative = True
    return request


def _step(sched: Scheduler, tokens: list[int]):
    """Schedule a step; its one sampling request gets `tokens` (the verified ones when it
    had drafts)."""
    out = sched.schedule()
    (item,) = out.scheduled
    result = ModelRunnerOutput(sampled={item.request_id: tokens[0]})
    if item.draft_token_ids:
        result.verified[item.request_id] = tokens
    return item, sched.update_from_output(out, result)


def test_a_decode_step_verifies_drafts_and_rolls_back_past_rejected_ones():
    sched = _scheduler()
    request = _speculative([1, 2, 3, 4, 5, 6, 7, 1, 2])  # 9 tokens: 3 blocks
    sched.add_request(request)
    _step(sched, [3])  # the prompt; then "2 3" recurs
    item, (out,) = _step(sched, [4, 9])  # 4 accepted, 9 instead of 5
    assert item.token_ids == [3, 4, 5, 6] and item.draft_token_ids == [4, 5, 6]
    assert item.num_computed_tokens == 9 and len(item.block_ids) == 4  # 13 positions
    assert out.new_token_ids == [4, 9] and (out.num_draft_tokens, out.num_accepted_tokens) == (3, 1)
    assert request.output_token_ids == [3, 4, 9]
    assert request.num_computed_tokens == 11  # up to the accepted 4; 9 is computed next
    assert len(sched.kv_cache.block_ids("a")) == 3  # the block of 5 and 6 alone is freed
    assert sched.kv_cache.pool.num_free_blocks == 32 - 3
    assert (request.num_draft_tokens, request.num_accepted_tokens) == (3, 1)
    assert (sched.num_draft_tokens, sched.num_accepted_tokens) == (3, 1)


def test_a_stop_token_inside_an_accepted_run_ends_the_request_there():
    sched = _scheduler()
    request = _speculative([1, 2, 3, 4, 5, 6, 7, 1, 2], stop_token_ids=[5])
    sched.add_request(request)
    _step(sched, [3])
    _, (out,) = _step(sched, [4, 5, 6, 7])  # all accepted, but 5 stops it
    assert out.new_token_ids == [4, 5] and out.finish_reason == "stop" and out.stop_reason == 5
    assert request.status == RequestStatus.FINISHED_STOPPED
    assert sched.kv_cache.pool.num_free_blocks == 32


def test_drafts_stop_short_of_max_tokens_and_the_budget():
    sched = _scheduler()
    request = _speculative([1, 2, 3, 4, 5, 6, 7, 1, 2], max_tokens=3)
    sched.add_request(request)
    _step(sched, [3])
    item, (out,) = _step(sched, [4, 5])  # one output so far: one draft, then one more
    assert item.draft_token_ids == [4]
    assert out.new_token_ids == [4, 5] and out.finish_reason == "length"
    sched = _scheduler(budget=3)
    request = _speculative([1, 2, 3, 4, 1, 2])
    sched.add_request(request)
    sched.update_from_output(sched.schedule(), ModelRunnerOutput())  # a chunk of the prompt
    _step(sched, [3])
    item, _ = _step(sched, [4, 1, 0])  # "2 3" recurs: 4 1 2 proposed, two fit the budget
    assert item.token_ids == [3, 4, 1] and item.draft_token_ids == [4, 1]


def test_an_abort_while_drafts_are_verified_frees_everything():
    sched = _scheduler()
    request = _speculative([1, 2, 3, 4, 5, 6, 7, 1, 2])
    sched.add_request(request)
    _step(sched, [3])
    out = sched.schedule()
    assert out.scheduled[0].draft_token_ids == [4, 5, 6]
    sched.finish_requests(["a"], RequestStatus.FINISHED_ABORTED)
    result = ModelRunnerOutput(sampled={"a": 4}, verified={"a": [4, 5, 6, 7]})
    assert sched.update_from_output(out, result) == []
    assert sched.kv_cache.pool.num_free_blocks == 32 and not sched.has_unfinished_requests()


def test_busy_steps_propose_no_drafts():
    """speculate_up_to (speculative_disable_by_batch_size): a step that starts with more
    running requests proposes nothing; once few enough remain, drafts come back."""
    sched = _scheduler(speculate_up_to=1)
    a = _speculative([1, 2, 3, 4, 5, 6, 7, 1, 2], max_tokens=8)
    b = _speculative([9, 8, 7, 9, 8], max_tokens=2, request_id="b")
    sched.add_request(a)
    sched.add_request(b)

    def step(tokens: dict[str, list[int]]):
        out = sched.schedule()
        result = ModelRunnerOutput(sampled={i.request_id: tokens[i.request_id][0]
                                            for i in out.scheduled})
        for item in out.scheduled:
            if item.draft_token_ids:
                result.verified[item.request_id] = tokens[item.request_id]
        sched.update_from_output(out, result)
        return {i.request_id: i.draft_token_ids for i in out.scheduled}

    assert step({"a": [3], "b": [7]}) == {"a": [], "b": []}  # the prompts
    assert step({"a": [4], "b": [9]}) == {"a": [], "b": []}  # two running: none
    assert b.status == RequestStatus.FINISHED_LENGTH
    assert step({"a": [5, 6, 7, 0]}) == {"a": [5, 6, 7]}  # "3 4" recurs; a alone again
