"""KVCacheManager: block tables, prefix-cache hits, forks, freeing."""

from pagoda.engine.kv_cache_manager import KVCacheManager
from tests.engine.helpers import make_request

BS = 4


def _schedule_all(kv: KVCacheManager, request) -> int:
    computed = kv.find_computed_blocks(request)
    cached = len(computed) * BS
    assert kv.allocate_slots(request, request.num_tokens - cached, computed)
    request.num_computed_tokens = request.num_tokens
    return cached


def test_allocation_rounds_up_to_blocks_and_grows_by_one_block_at_a_time():
    kv = KVCacheManager(num_blocks=8, block_size=BS)
    req = make_request("a", list(range(1, 10)))  # 9 tokens -> 3 blocks
    assert _schedule_all(kv, req) == 0
    assert len(kv.block_ids("a")) == 3
    for token in (10, 11, 12):  # fill the third block: no new block
        req.output_token_ids.append(token)
        assert kv.allocate_slots(req, 1)
        req.num_computed_tokens += 1
    assert len(kv.block_ids("a")) == 3
    req.output_token_ids.append(13)
    assert kv.allocate_slots(req, 1)
    assert len(kv.block_ids("a")) == 4


def test_allocation_failure_changes_nothing():
    kv = KVCacheManager(num_blocks=2, block_size=BS)
    req = make_request("a", list(range(1, 13)))  # needs 3 blocks
    assert not kv.allocate_slots(req, 12)
    assert kv.pool.num_free_blocks == 2 and kv.block_ids("a") == []


def test_prefix_hit_reuses_full_blocks_and_leaves_the_last_token():
    kv = KVCacheManager(num_blocks=16, block_size=BS)
    first = make_request("a", list(range(1, 13)))  # 12 tokens = 3 full blocks
    _schedule_all(kv, first)
    first_ids = kv.block_ids("a")
    kv.free(first)
    # Same 12-token prompt: only 2 blocks may be reused (the last token must be computed).
    same = make_request("b", list(range(1, 13)))
    assert _schedule_all(kv, same) == 8
    assert kv.block_ids("b")[:2] == first_ids[:2]
    # A prompt that shares 1.5 blocks reuses exactly one.
    partial = make_request("c", [1, 2, 3, 4, 5, 6, 99, 98, 97])
    assert _schedule_all(kv, partial) == 4
    assert kv.block_ids("c")[0] == kv.block_ids("b")[0]


def test_hit_blocks_are_shared_with_ref_counts_and_survive_one_owner():
    kv = KVCacheManager(num_blocks=16, block_size=BS)
    a = make_request("a", list(range(1, 10)))
    _schedule_all(kv, a)
    b = make_request("b", list(range(1, 10)))
    _schedule_all(kv, b)
    shared = kv.pool.blocks[kv.block_ids("a")[0]]
    assert kv.block_ids("b")[0] == shared.block_id and shared.ref_count == 2
    kv.free(a)
    assert shared.ref_count == 1
    kv.free(b)
    assert shared.ref_count == 0 and kv.pool.num_free_blocks == 16


def test_different_prefix_same_block_tokens_do_not_hit():
    kv = KVCacheManager(num_blocks=16, block_size=BS)
    _schedule_all(kv, make_request("a", [1, 2, 3, 4, 5, 6, 7, 8, 9]))
    assert _schedule_all(kv, make_request("b", [9, 9, 9, 9, 5, 6, 7, 8, 9])) == 0


def test_free_releases_tail_first_so_prefix_is_evicted_last():
    kv = KVCacheManager(num_blocks=3, block_size=BS)
    a = make_request("a", list(range(1, 13)))
    _schedule_all(kv, a)
    ids = kv.block_ids("a")
    kv.free(a)
    # One new block evicts the tail of a's prefix, not its head.
    b = make_request("b", [50, 51, 52])
    _schedule_all(kv, b)
    assert kv.block_ids("b") == [ids[2]]
    c = make_request("c", list(range(1, 13)) + [77])
    assert kv.find_computed_blocks(c)[0].block_id == ids[0]
    assert len(kv.find_computed_blocks(c)) == 2


def test_fork_shares_the_parents_computed_prompt_blocks_even_without_caching():
    kv = KVCacheManager(num_blocks=8, block_size=BS, enable_prefix_caching=False)
    parent = make_request("p", list(range(1, 11)))  # 10 tokens: 2 full blocks
    _schedule_all(kv, parent)
    child = make_request("p#1", list(range(1, 11)))
    child.fork_of = parent
    assert _schedule_all(kv, child) == 8
    assert kv.block_ids("p#1")[:2] == kv.block_ids("p")[:2]
    assert kv.block_ids("p#1")[2] != kv.block_ids("p")[2]


def test_prompt_logprobs_requests_skip_the_cache():
    kv = KVCacheManager(num_blocks=8, block_size=BS)
    _schedule_all(kv, make_request("a", list(range(1, 10))))
    assert _schedule_all(kv, make_request("b", list(range(1, 10)), prompt_logprobs=1)) == 0
