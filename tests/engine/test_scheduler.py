"""Scheduler: budgets, chunked prefill, FCFS/priority, preemption and resume, abort."""

from pagoda.config import SchedulerConfig
from pagoda.engine.kv_cache_manager import KVCacheManager
from pagoda.engine.request import Request, RequestStatus
from pagoda.engine.scheduler import Scheduler
from pagoda.engine.scheduler_output import ModelRunnerOutput
from pagoda.pooling_params import PoolingParams
from tests.engine.helpers import make_request

BS = 4


def make_scheduler(num_blocks=64, max_tokens=32, max_seqs=8, policy="fcfs", caching=True):
    kv = KVCacheManager(num_blocks, BS, caching)
    return Scheduler(SchedulerConfig(max_seqs, max_tokens, policy), kv, max_model_len=1024)


def run_step(sched: Scheduler, token: int = 7):
    """Schedule one step and feed back `token` for every request that samples."""
    out = sched.schedule()
    result = ModelRunnerOutput(sampled={s.request_id: token for s in out.scheduled if s.sample})
    return out, sched.update_from_output(out, result)


def test_running_first_then_waiting_under_token_budget():
    sched = make_scheduler(max_tokens=10)
    a, b = make_request("a", range(1, 7)), make_request("b", range(11, 17))
    sched.add_request(a)
    sched.add_request(b)
    out, _ = run_step(sched)
    # 10 tokens: all 6 of a, then a 4-token chunk of b.
    assert {s.request_id: len(s.token_ids) for s in out.scheduled} == {"a": 6, "b": 4}
    assert [s.sample for s in out.scheduled] == [True, False]
    out, _ = run_step(sched)
    # a decodes (1 token), b finishes its prompt (2 tokens).
    assert {s.request_id: len(s.token_ids) for s in out.scheduled} == {"a": 1, "b": 2}
    assert out.num_tokens <= 10


def test_chunked_prefill_positions_and_tokens_are_contiguous():
    sched = make_scheduler(max_tokens=8)
    req = make_request("a", range(1, 21))
    sched.add_request(req)
    seen = []
    while req.num_output_tokens == 0:
        out, _ = run_step(sched)
        (item,) = out.scheduled
        assert item.num_computed_tokens == len(seen)
        seen.extend(item.token_ids)
    assert seen == list(range(1, 21))


def test_max_num_seqs_limits_running():
    sched = make_scheduler(max_seqs=2)
    for i in range(4):
        sched.add_request(make_request(str(i), [1, 2, 3]))
    out, _ = run_step(sched)
    assert [s.request_id for s in out.scheduled] == ["0", "1"]
    assert sched.num_running == 2 and sched.num_waiting == 2


def test_stop_conditions_eos_stop_token_min_tokens_and_length():
    sched = make_scheduler()
    eos = make_request("eos", [1, 2])
    stop = make_request("stop", [1, 2], stop_token_ids=[9])
    length = make_request("len", [1, 2], max_tokens=2)
    guarded = make_request("min", [1, 2], min_tokens=2)
    for r in (eos, stop, length, guarded):
        sched.add_request(r)
    out = sched.schedule()
    result = ModelRunnerOutput(sampled={"eos": 0, "stop": 9, "len": 5, "min": 0})
    finished = {o.request_id: o.finish_reason for o in sched.update_from_output(out, result)}
    assert finished == {"eos": "stop", "stop": "stop", "len": None, "min": None}
    assert stop.stop_reason == 9
    out = sched.schedule()
    outs = sched.update_from_output(out, ModelRunnerOutput(sampled={"len": 5, "min": 0}))
    finished = {o.request_id: o.finish_reason for o in outs}
    assert finished == {"len": "length", "min": "stop"}
    assert not sched.has_unfinished_requests()
    assert sched.kv_cache.pool.num_free_blocks == 64


def test_ignore_eos():
    sched = make_scheduler()
    req = make_request("a", [1], max_tokens=3, ignore_eos=True)
    sched.add_request(req)
    for _ in range(3):
        run_step(sched, token=0)
    assert req.status == RequestStatus.FINISHED_LENGTH and req.output_token_ids == [0, 0, 0]


def test_preemption_frees_the_newest_and_it_resumes_from_scratch():
    # 4 blocks of 4 tokens; two requests of 6-token prompts need 2 blocks each, then grow.
    sched = make_scheduler(num_blocks=4, caching=False)
    old = make_request("old", range(1, 7), max_tokens=6)
    new = make_request("new", range(1, 7), max_tokens=6)
    sched.add_request(old)
    sched.add_request(new)
    for _ in range(3):  # prefill, then two decodes: both have 8 tokens in 4 full blocks
        run_step(sched)
    out, _ = run_step(sched)  # old needs a 3rd block: new is preempted
    assert [s.request_id for s in out.scheduled] == ["old"]
    assert new.status == RequestStatus.PREEMPTED and new.num_computed_tokens == 0
    assert new.num_preemptions == 1 and sched.num_preemptions == 1
    assert "new" in out.finished_request_ids
    outputs_before = list(new.output_token_ids)
    while old.status == RequestStatus.RUNNING:
        run_step(sched)
    assert old.status == RequestStatus.FINISHED_LENGTH
    out, _ = run_step(sched)
    # Resumed: recomputes prompt + outputs so far, and is sent to workers as new again.
    (item,) = out.scheduled
    assert item.request_id == "new" and item.num_computed_tokens == 0
    assert item.token_ids == list(range(1, 7)) + outputs_before
    assert [n.request_id for n in out.new_requests] == ["new"]
    assert out.new_requests[0].output_token_ids == outputs_before


def test_priority_policy_schedules_and_preempts_by_priority():
    sched = make_scheduler(num_blocks=4, max_seqs=1, policy="priority", caching=False)
    low, high = make_request("low", [1, 2], priority=5), make_request("high", [1, 2], priority=0)
    sched.add_request(low)
    sched.add_request(high)
    out, _ = run_step(sched)
    assert [s.request_id for s in out.scheduled] == ["high"]


def test_abort_frees_blocks_at_once():
    sched = make_scheduler(num_blocks=16)
    a, b = make_request("a", range(1, 10)), make_request("b", range(1, 5))
    sched.add_request(a)
    sched.add_request(b)
    run_step(sched)
    assert sched.kv_cache.pool.num_free_blocks < 16
    sched.finish_requests(["a", "b"], RequestStatus.FINISHED_ABORTED)
    assert sched.kv_cache.pool.num_free_blocks == 16
    assert a.status == RequestStatus.FINISHED_ABORTED and not sched.has_unfinished_requests()
    out, _ = run_step(sched)
    assert out.scheduled == [] and set(out.finished_request_ids) == {"a", "b"}


def test_abort_of_waiting_request():
    sched = make_scheduler(max_seqs=1)
    sched.add_request(make_request("a", [1]))
    sched.add_request(make_request("b", [1]))
    sched.finish_requests(["b"], RequestStatus.FINISHED_ABORTED)
    assert sched.num_waiting == 1


def test_prefix_cache_hit_is_reported_and_skips_computation():
    sched = make_scheduler()
    first = make_request("a", range(1, 14), max_tokens=1)
    sched.add_request(first)
    run_step(sched)
    second = make_request("b", range(1, 14), max_tokens=1)
    sched.add_request(second)
    out, outs = run_step(sched)
    (item,) = out.scheduled
    assert item.num_computed_tokens == 12 and item.token_ids == [13]
    assert outs[0].num_cached_tokens == 12
    stats = sched.kv_cache.stats
    assert (stats.queries, stats.hits) == (26, 12)


def test_fork_waits_for_its_first_sibling_then_shares_prompt_blocks():
    sched = make_scheduler(max_tokens=8, caching=False)
    first = make_request("p#0", range(1, 11))
    second = make_request("p#1", range(1, 11))
    second.fork_of = first
    sched.add_request(first)
    sched.add_request(second)
    out, _ = run_step(sched)
    assert [s.request_id for s in out.scheduled] == ["p#0"]  # budget 8 < 10-token prompt
    out, _ = run_step(sched)
    assert [s.request_id for s in out.scheduled] == ["p#0"]
    out, _ = run_step(sched)
    ids = {s.request_id: s for s in out.scheduled}
    assert ids["p#1"].num_computed_tokens == 8
    assert ids["p#1"].block_ids[:2] == ids["p#0"].block_ids[:2]


def test_a_pooling_request_finishes_with_its_pooled_output():
    """Its prompt only: pooled in the step of its last chunk, then finished by the output."""
    sched = make_scheduler(max_tokens=8)
    req = Request("p", list(range(1, 13)), None, 0, pooling_params=PoolingParams(),
                  token_type_ids=[0] * 12)
    sched.add_request(req)
    out = sched.schedule()
    assert [(len(s.token_ids), s.sample) for s in out.scheduled] == [(8, False)]
    (new,) = out.new_requests
    assert (new.pooling_params, new.token_type_ids) == (req.pooling_params, [0] * 12)
    assert sched.update_from_output(out, ModelRunnerOutput()) == []
    out = sched.schedule()
    assert [(len(s.token_ids), s.sample) for s in out.scheduled] == [(4, True)]
    assert sched.schedule().is_empty  # nothing more to compute while its output is in flight
    (done,) = sched.update_from_output(out, ModelRunnerOutput(pooled={"p": [0.5, 0.25]}))
    assert (done.pooled, done.finish_reason, done.new_token_ids) == ([0.5, 0.25], "stop", [])
    assert req.status == RequestStatus.FINISHED_STOPPED
    assert not sched.has_unfinished_requests() and sched.kv_cache.usage == 0.0
