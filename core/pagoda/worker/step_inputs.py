"""Flatten one scheduled step into the model's inputs (no padding)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pagoda.attention.backend import AttentionMetadata
from pagoda.engine.scheduler_output import ScheduledRequest


@dataclass
class StepInputs:
    input_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64
    metadata: AttentionMetadata
    last_token_index: list[int]
    """Per scheduled request, the row of its last token this step."""


def build_step_inputs(
    scheduled: list[ScheduledRequest], block_size: int, device: torch.device
) -> StepInputs:
    input_ids: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    query_start_loc = [0]
    seq_lens: list[int] = []
    for item in scheduled:
        start, n = item.num_computed_tokens, len(item.token_ids)
        input_ids.extend(item.token_ids)
        span = range(start, start + n)
        positions.extend(span)
        blocks = item.block_ids
        slots.extend(blocks[p // block_size] * block_size + p % block_size for p in span)
        query_start_loc.append(query_start_loc[-1] + n)
        seq_lens.append(start + n)
    width = max(len(item.block_ids) for item in scheduled)
    table = [item.block_ids + [0] * (width - len(item.block_ids)) for item in scheduled]

    def tensor(values: list, dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype).to(device, non_blocking=True)

    metadata = AttentionMetadata(
        num_tokens=len(input_ids),
        slot_mapping=tensor(slots, torch.int64),
        block_tables=tensor(table, torch.int32),
        query_start_loc=tensor(query_start_loc, torch.int32),
        seq_lens=tensor(seq_lens, torch.int32),
        query_start_loc_cpu=query_start_loc,
        seq_lens_cpu=seq_lens,
        max_query_len=max(len(item.token_ids) for item in scheduled),
        max_seq_len=max(seq_lens),
    )
    return StepInputs(
        input_ids=tensor(input_ids, torch.int64),
        positions=tensor(positions, torch.int64),
        metadata=metadata,
        last_token_index=[end - 1 for end in query_start_loc[1:]],
    )
