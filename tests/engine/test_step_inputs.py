"""A step's inputs as the kernels read them (`pagoda.worker.step_inputs`)."""

from __future__ import annotations

import random

import torch

from pagoda.engine.scheduler_output import ScheduledRequest
from pagoda.worker.step_inputs import ALIGN_BYTES, build_step_inputs

BLOCK = 4


def _step(rng: random.Random, num_seqs: int) -> list[ScheduledRequest]:
    """Prefill chunks and decodes of random lengths, each sequence on its own blocks."""
    step, next_block = [], 0
    for i in range(num_seqs):
        computed, new = rng.randrange(0, 9), rng.choice([1, 1, rng.randrange(1, 12)])
        blocks = list(range(next_block, next_block + -(-(computed + new) // BLOCK)))
        next_block += len(blocks)
        step.append(ScheduledRequest(str(i), computed, [rng.randrange(100) for _ in range(new)],
                                     blocks, sample=True))
    return step


def test_every_input_starts_aligned_and_holds_its_values() -> None:
    """Triton compiles a kernel once per alignment of each pointer it takes: inputs packed
    at offsets that follow the step's size (num_seqs + 1 int32s, num_tokens int64s) had
    kernels compile new variants mid-run. Steps of 1 to 9 sequences, odd and even token
    counts: every input starts at a 16-byte boundary and holds what the step says."""
    rng = random.Random(0)
    for num_seqs in range(1, 10):
        step = _step(rng, num_seqs)
        inputs = build_step_inputs(step, BLOCK, torch.device("cpu"))
        meta = inputs.metadata
        tensors = {"input_ids": inputs.input_ids, "positions": inputs.positions,
                   "slot_mapping": meta.slot_mapping, "block_tables": meta.block_tables,
                   "query_start_loc": meta.query_start_loc, "seq_lens": meta.seq_lens}
        for name, tensor in tensors.items():
            assert tensor.data_ptr() % ALIGN_BYTES == 0, (num_seqs, name)
        assert inputs.input_ids.tolist() == [t for item in step for t in item.token_ids]
        assert inputs.positions.tolist() == [
            p for item in step for p in range(item.num_computed_tokens,
                                              item.num_computed_tokens + len(item.token_ids))]
        assert meta.seq_lens.tolist() == [i.num_computed_tokens + len(i.token_ids) for i in step]
        lens = [len(item.token_ids) for item in step]
        assert meta.query_start_loc.tolist() == [sum(lens[:i]) for i in range(num_seqs + 1)]
        for row, item in zip(meta.block_tables.tolist(), step, strict=True):
            assert row[: len(item.block_ids)] == item.block_ids
        slots = [item.block_ids[p // BLOCK] * BLOCK + p % BLOCK for item in step
                 for p in range(item.num_computed_tokens,
                                item.num_computed_tokens + len(item.token_ids))]
        assert meta.slot_mapping.tolist() == slots
