"""Flatten one scheduled step into model inputs padded to its shape buckets.

Padding tokens have id 0, position 0 and slot -1 (the attention backend writes them into its
padding block); padding sequences have no query rows, length 0 and an all-zero block-table
row. Block tables are padded with zeros up to the bucketed width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pagoda.attention import AttentionMetadata
from pagoda.engine.scheduler_output import ScheduledRequest
from pagoda_tpu.shapes import StepShapes


@dataclass
class PaddedStep:
    input_ids: torch.Tensor  # [tokens bucket] int64
    positions: torch.Tensor  # [tokens bucket] int64
    metadata: AttentionMetadata
    last_token_rows: torch.Tensor
    """[seqs bucket] int64: each sequence's last token row, 0 for padding sequences."""
    query_starts: list[int]
    """Each scheduled request's first token row."""


def pad_step(
    scheduled: list[ScheduledRequest], block_size: int, shapes: StepShapes,
    device: torch.device,
) -> PaddedStep:
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
        slots.extend(item.block_ids[p // block_size] * block_size + p % block_size for p in span)
        query_start_loc.append(query_start_loc[-1] + n)
        seq_lens.append(start + n)
    num_tokens, num_seqs = len(input_ids), len(scheduled)
    tokens_bucket, seqs_bucket = shapes.tokens(num_tokens), shapes.seqs(num_seqs)
    width = shapes.blocks(max(len(item.block_ids) for item in scheduled))
    pad_tokens, pad_seqs = tokens_bucket - num_tokens, seqs_bucket - num_seqs
    table = [item.block_ids + [0] * (width - len(item.block_ids)) for item in scheduled]
    table += [[0] * width] * pad_seqs
    last_rows = [end - 1 for end in query_start_loc[1:]] + [0] * pad_seqs
    query_starts = query_start_loc[:-1]
    query_start_loc += [num_tokens] * pad_seqs
    max_query_len = max(len(item.token_ids) for item in scheduled)
    max_seq_len = max(seq_lens)
    seq_lens += [0] * pad_seqs

    def tensor(values: list, dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype).to(device)

    metadata = AttentionMetadata(
        num_tokens=tokens_bucket,
        slot_mapping=tensor(slots + [-1] * pad_tokens, torch.int64),
        block_tables=tensor(table, torch.int32),
        query_start_loc=tensor(query_start_loc, torch.int32),
        seq_lens=tensor(seq_lens, torch.int32),
        query_start_loc_cpu=query_start_loc,
        seq_lens_cpu=seq_lens,
        max_query_len=max_query_len,
        max_seq_len=max_seq_len,
    )
    return PaddedStep(
        input_ids=tensor(input_ids + [0] * pad_tokens, torch.int64),
        positions=tensor(positions + [0] * pad_tokens, torch.int64),
        metadata=metadata,
        last_token_rows=tensor(last_rows, torch.int64),
        query_starts=query_starts,
    )
