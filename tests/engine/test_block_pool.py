"""BlockPool: allocation order, reference counts, the prefix cache and eviction."""

import pytest

from pagoda.engine.block_pool import BlockPool, hash_block


def test_hash_chains_over_the_prefix():
    a = hash_block(None, [1, 2, 3, 4])
    assert hash_block(None, [1, 2, 3, 4]) == a
    assert hash_block(None, [1, 2, 3, 5]) != a
    # Same tokens after a different prefix are a different block.
    assert hash_block(a, [5, 6, 7, 8]) != hash_block(hash_block(None, [9, 9, 9, 9]), [5, 6, 7, 8])
    # Token boundaries matter: [1, 23] is not [12, 3].
    assert hash_block(None, [1, 23]) != hash_block(None, [12, 3])


def test_allocate_and_release_track_ref_counts():
    pool = BlockPool(4, enable_caching=True)
    blocks = pool.allocate(3)
    assert [b.ref_count for b in blocks] == [1, 1, 1]
    assert pool.num_free_blocks == 1
    pool.acquire(blocks[:1])
    assert blocks[0].ref_count == 2
    pool.release(blocks)
    assert blocks[0].ref_count == 1 and pool.num_free_blocks == 3
    pool.release(blocks[:1])
    assert pool.num_free_blocks == 4
    with pytest.raises(RuntimeError):
        pool.allocate(5)


def test_cached_free_block_is_reusable_until_evicted_lru_first():
    pool = BlockPool(3, enable_caching=True)
    a, b, c = pool.allocate(3)
    pool.cache(a, b"ha")
    pool.cache(b, b"hb")
    pool.release([b])  # freed first: least recently used
    pool.release([a])
    assert pool.lookup(b"ha") is a and pool.lookup(b"hb") is b
    # A hit takes the block back out of the free queue.
    pool.acquire([a])
    assert a.ref_count == 1 and pool.num_free_blocks == 1
    # The next allocation evicts the least recently freed cached block (b).
    (taken,) = pool.allocate(1)
    assert taken is b and pool.lookup(b"hb") is None and taken.block_hash is None
    assert pool.lookup(b"ha") is a
    pool.release([c])
    assert pool.usage == pytest.approx(2 / 3)


def test_caching_disabled_never_hits():
    pool = BlockPool(2, enable_caching=False)
    (a,) = pool.allocate(1)
    pool.cache(a, b"h")
    pool.release([a])
    assert pool.lookup(b"h") is None


def test_reset_prefix_cache_only_when_idle():
    pool = BlockPool(2, enable_caching=True)
    (a,) = pool.allocate(1)
    pool.cache(a, b"h")
    assert not pool.reset_prefix_cache()
    pool.release([a])
    assert pool.reset_prefix_cache()
    assert pool.lookup(b"h") is None


def test_freed_blocks_without_a_prefix_come_first_then_never_used_then_cached():
    pool = BlockPool(5, enable_caching=True)
    a, b, c = pool.allocate(3)
    assert (a.block_id, b.block_id, c.block_id) == (0, 1, 2)  # the lowest ids first
    pool.cache(a, b"ha")
    pool.cache(c, b"hc")
    pool.release([c, b, a])
    assert pool.num_free_blocks == 5
    taken = pool.allocate(5)
    # b (already written, caching nothing), never-used 3 and 4, then the cached blocks
    # least recently freed first, their prefixes evicted only then
    assert [t.block_id for t in taken] == [1, 3, 4, 2, 0]
    assert pool.lookup(b"ha") is None and pool.lookup(b"hc") is None
    pool.release(taken)
    assert pool.num_free_blocks == 5


def test_reset_prefix_cache_frees_blocks_first():
    pool = BlockPool(3, enable_caching=True)
    (a,) = pool.allocate(1)
    pool.cache(a, b"h")
    pool.release([a])
    assert pool.allocate(1)[0].block_id == 1  # never-used before cached
    pool.release([pool.blocks[1]])
    assert pool.reset_prefix_cache()
    assert [t.block_id for t in pool.allocate(3)] == [1, 0, 2]
