"""The kit's paged batches are laid out as the engine would: shuffled blocks owned by one
sequence each, slots of the queried tokens, -1 for padding, and a context step."""

from __future__ import annotations

import torch

from pagoda.testing.paged import MIXED_BATCH, random_paged_batch


def _batch(**kwargs: int):
    return random_paged_batch(MIXED_BATCH, 16, torch.Generator().manual_seed(0), **kwargs)


def test_blocks_are_disjoint_shuffled_and_sufficient() -> None:
    batch = _batch(spare_blocks=3)
    owned = [b for blocks in batch.blocks for b in blocks]
    assert len(owned) == len(set(owned)) == batch.num_blocks - 3
    for blocks, (_, seq_len) in zip(batch.blocks, MIXED_BATCH, strict=True):
        assert len(blocks) * 16 >= seq_len > (len(blocks) - 1) * 16
    assert owned != sorted(owned)


def test_metadata_matches_sequences() -> None:
    batch = _batch(num_padding=2)
    meta = batch.metadata()
    q_lens = [q for q, _ in MIXED_BATCH]
    assert meta.query_start_loc_cpu == [sum(q_lens[:i]) for i in range(len(q_lens) + 1)]
    assert meta.seq_lens_cpu == [s for _, s in MIXED_BATCH]
    assert meta.num_tokens == sum(q_lens) + 2
    assert (meta.max_query_len, meta.max_seq_len) == (17, 40)
    assert meta.block_tables.dtype == torch.int32 and meta.slot_mapping.dtype == torch.int64
    assert meta.block_tables.shape == (len(MIXED_BATCH), 3)


def test_slot_mapping_points_at_queried_positions() -> None:
    batch = _batch(num_padding=2)
    slots = batch.slot_mapping().tolist()
    assert slots[-2:] == [-1, -1]
    # The chunk (q_len 9 of 40) queries positions 31..39: blocks[1][1], blocks[1][2].
    chunk = slots[17:26]
    blocks = batch.blocks[1]
    assert chunk[0] == blocks[1] * 16 + 15
    assert chunk[1:] == [blocks[2] * 16 + i for i in range(8)]
    assert len(set(slots[:-2])) == len(slots) - 2


def test_context_step_caches_what_precedes_the_queries() -> None:
    batch = _batch(num_padding=2)
    context = batch.context_step()
    # The context of the chunk, of the decode and of the sequence without query rows.
    assert context.seqs == ((31, 31), (32, 32), (5, 5))
    assert context.blocks == batch.blocks[1:4]
    assert context.num_padding == 0
    written = set(context.slot_mapping().tolist()) | set(batch.slot_mapping().tolist()[:-2])
    needed = {batch.slot(b, p) for b, (_, s) in enumerate(MIXED_BATCH) for p in range(s)}
    assert written == needed
