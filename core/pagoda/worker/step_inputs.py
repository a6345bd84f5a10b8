"""Flatten one scheduled step into the model's inputs, padded where the platform says.

Built with numpy in a handful of vectorised operations (a step may hold hundreds of
sequences, and this runs on the host for every step), then moved to the device in two
copies: one of the int64 inputs, one of the int32 attention metadata, each input at a
16-byte boundary of its copy (`ALIGN_BYTES`). With a
`StepPadding` (platforms that compile per shape) the arrays are padded to the shape it
chooses (see `pagoda.platforms.step_padding` for what padding holds).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

import numpy as np
import torch

from pagoda.attention.backend import AttentionMetadata
from pagoda.engine.scheduler_output import ScheduledRequest
from pagoda.platforms.step_padding import StepPadding, StepShape

ALIGN_BYTES = 16
"""Where each input starts in the step's packed copies. Triton specialises a kernel on
whether each pointer it takes is 16-byte aligned, so an input whose alignment moved with
the step's size (a slice at an offset of num_seqs + 1 int32s) had a kernel compile a new
variant in the middle of a run the first time the other alignment came."""


@dataclass
class StepInputs:
    input_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64
    metadata: AttentionMetadata
    last_token_index: list[int]
    """Per scheduled request, the row of its last token this step."""
    shape: StepShape
    """The shape the step runs at (padded, or the step's own)."""


def build_step_inputs(
    scheduled: list[ScheduledRequest], block_size: int, device: torch.device,
    padding: StepPadding | None = None,
) -> StepInputs:
    num_seqs = len(scheduled)
    query_lens = np.fromiter((len(item.token_ids) for item in scheduled), np.int64, num_seqs)
    starts = np.fromiter((item.num_computed_tokens for item in scheduled), np.int64, num_seqs)
    table_lens = np.fromiter((len(item.block_ids) for item in scheduled), np.int64, num_seqs)
    shape = StepShape(int(query_lens.sum()), num_seqs, int(table_lens.max()))
    if padding is not None:
        shape = padding.pad(shape)
        extra = shape.num_seqs - num_seqs
        query_lens, starts, table_lens = (np.pad(a, (0, extra)) for a in (query_lens, starts,
                                                                           table_lens))
    query_start_loc = np.zeros(shape.num_seqs + 1, np.int64)
    np.cumsum(query_lens, out=query_start_loc[1:])
    num_tokens = int(query_start_loc[-1])  # the real ones; padding tokens follow
    seq_lens = starts + query_lens

    width = shape.max_blocks
    table = np.zeros((shape.num_seqs, width), np.int32)
    table[np.arange(width) < table_lens[:, None]] = np.fromiter(
        chain.from_iterable(item.block_ids for item in scheduled), np.int32, int(table_lens.sum()))

    # Token t of sequence s sits at position starts[s] + (t - query_start_loc[s]).
    seq_of_token = np.repeat(np.arange(shape.num_seqs), query_lens)
    positions = np.arange(num_tokens) + np.repeat(starts - query_start_loc[:-1], query_lens)
    slots = table[seq_of_token, positions // block_size].astype(np.int64) * block_size + (
        positions % block_size)
    input_ids = np.fromiter(chain.from_iterable(item.token_ids for item in scheduled), np.int64,
                            num_tokens)
    if shape.num_tokens > num_tokens:
        extra = shape.num_tokens - num_tokens
        input_ids, positions = np.pad(input_ids, (0, extra)), np.pad(positions, (0, extra))
        slots = np.pad(slots, (0, extra), constant_values=-1)

    input_ids_d, positions_d, slots_d = _to_device((input_ids, positions, slots), np.int64,
                                                   device)
    qsl_d, seq_lens_d, table_d = _to_device(
        (query_start_loc.astype(np.int32), seq_lens.astype(np.int32), table.ravel()), np.int32,
        device)
    t, s = shape.num_tokens, shape.num_seqs

    query_start_loc_cpu = query_start_loc.tolist()
    metadata = AttentionMetadata(
        num_tokens=t,
        slot_mapping=slots_d,
        block_tables=table_d.view(s, width),
        query_start_loc=qsl_d,
        seq_lens=seq_lens_d,
        query_start_loc_cpu=query_start_loc_cpu,
        seq_lens_cpu=seq_lens.tolist(),
        max_query_len=int(query_lens.max()),
        max_seq_len=int(seq_lens.max()),
    )
    return StepInputs(
        input_ids=input_ids_d,
        positions=positions_d,
        metadata=metadata,
        last_token_index=[end - 1 for end in query_start_loc_cpu[1 : num_seqs + 1]],
        shape=shape,
    )


def _to_device(parts: tuple[np.ndarray, ...], dtype: type, device: torch.device
               ) -> list[torch.Tensor]:
    """`parts` on the device in one copy, each starting at an `ALIGN_BYTES` boundary."""
    per = ALIGN_BYTES // np.dtype(dtype).itemsize
    starts, total = [], 0
    for part in parts:
        starts.append(total)
        total += -(-len(part) // per) * per
    packed = np.zeros(total, dtype)
    for start, part in zip(starts, parts, strict=True):
        packed[start : start + len(part)] = part
    copy = torch.from_numpy(packed).to(device, non_blocking=True)
    # Slices, not split(): torch-xla 2.9 aborts on split() views used as indices.
    return [copy[start : start + len(part)] for start, part in zip(starts, parts, strict=True)]
