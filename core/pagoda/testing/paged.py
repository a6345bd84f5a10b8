"""Random paged batches: shuffled block tables, slot mappings and mixed query lengths.

A sequence is given as (q_len, seq_len): its last q_len tokens are queried in this step and
its first seq_len tokens are (or will be) in the KV cache. q_len == seq_len is a prefill,
q_len == 1 a decode, anything between a prefill chunk, q_len == 0 a sequence with no query
rows this step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from pagoda.attention.backend import AttentionMetadata

MIXED_BATCH: tuple[tuple[int, int], ...] = ((17, 17), (9, 40), (1, 33), (0, 5), (1, 1), (4, 4))
"""Pure prefill, prefill chunk, decode, empty query rows, a one-token prefill, a prefill."""

DECODE_BATCH: tuple[tuple[int, int], ...] = ((1, 20), (1, 3), (1, 64), (1, 16))
PREFILL_BATCH: tuple[tuple[int, int], ...] = ((13, 13), (1, 1), (32, 32))
CHUNK_BATCH: tuple[tuple[int, int], ...] = ((5, 21), (16, 48))
VERIFY_BATCH: tuple[tuple[int, int], ...] = ((5, 40), (3, 21), (1, 33), (0, 5), (2, 2), (4, 18))
"""A speculative verify step: 1 + k query tokens a sequence over its context (k drafts),
a plain decode, an empty query row, a sequence of two tokens with no context."""


@dataclass
class PagedBatch:
    """The layout of one step: which cache slots each sequence and query token uses."""

    seqs: tuple[tuple[int, int], ...]  # (q_len, seq_len) per sequence
    block_size: int
    num_blocks: int
    blocks: list[list[int]]  # physical blocks of each sequence, in logical order
    num_padding: int = 0  # trailing tokens that belong to no sequence (slot -1)

    @property
    def num_query_tokens(self) -> int:
        return sum(q for q, _ in self.seqs)

    @property
    def num_tokens(self) -> int:
        return self.num_query_tokens + self.num_padding

    def block_tables(self) -> torch.Tensor:
        """[B, max_blocks] int32, rows padded with 0 past each sequence's blocks."""
        width = max([len(b) for b in self.blocks] + [1])
        table = torch.zeros(len(self.blocks), width, dtype=torch.int32)
        for row, blocks in enumerate(self.blocks):
            table[row, : len(blocks)] = torch.tensor(blocks, dtype=torch.int32)
        return table

    def query_start_loc(self) -> list[int]:
        starts = [0]
        for q_len, _ in self.seqs:
            starts.append(starts[-1] + q_len)
        return starts

    def slot(self, seq: int, position: int) -> int:
        return self.blocks[seq][position // self.block_size] * self.block_size + (
            position % self.block_size
        )

    def slot_mapping(self) -> torch.Tensor:
        """[num_tokens] int64: the cache slot of each query token, -1 for padding."""
        slots = [
            self.slot(b, pos)
            for b, (q_len, seq_len) in enumerate(self.seqs)
            for pos in range(seq_len - q_len, seq_len)
        ]
        return torch.tensor(slots + [-1] * self.num_padding, dtype=torch.int64)

    def context_step(self) -> PagedBatch:
        """The earlier step that cached every sequence's context (its tokens before the
        queried ones) as one prefill each; sequences without context are left out."""
        keep = [b for b, (q, s) in enumerate(self.seqs) if s - q > 0]
        return PagedBatch(
            tuple((s - q, s - q) for q, s in (self.seqs[b] for b in keep)),
            self.block_size, self.num_blocks, [self.blocks[b] for b in keep],
        )

    def metadata(self, device: torch.device | str = "cpu") -> AttentionMetadata:
        starts = self.query_start_loc()
        seq_lens = [s for _, s in self.seqs]
        return AttentionMetadata(
            num_tokens=self.num_tokens,
            slot_mapping=self.slot_mapping().to(device),
            block_tables=self.block_tables().to(device),
            query_start_loc=torch.tensor(starts, dtype=torch.int32, device=device),
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
            query_start_loc_cpu=starts,
            seq_lens_cpu=seq_lens,
            max_query_len=max([q for q, _ in self.seqs] + [0]),
            max_seq_len=max(seq_lens + [0]),
        )


def random_paged_batch(
    seqs: Sequence[tuple[int, int]],
    block_size: int,
    generator: torch.Generator,
    spare_blocks: int = 3,
    num_padding: int = 0,
) -> PagedBatch:
    """Give each sequence the blocks it needs, drawn from a shuffled pool (so tables are
    non-contiguous and out of order), with `spare_blocks` unused blocks in the pool.

    Where sequences have whole blocks of context (cached by an earlier step, read by this
    one), the cache's last block and then its first hold such context: a kernel that writes
    a padding token (slot -1) to the last slot, or to slot 0, then corrupts what is read."""
    needed = [-(-seq_len // block_size) for _, seq_len in seqs]
    num_blocks = sum(needed) + spare_blocks
    pool = torch.randperm(num_blocks, generator=generator).tolist()
    blocks, taken = [], 0
    for n in needed:
        blocks.append(pool[taken : taken + n])
        taken += n
    context_blocks = [(b, i) for b, (q, s) in enumerate(seqs)
                      for i in range((s - q) // block_size)]
    for (seq, index), physical in zip(context_blocks, (num_blocks - 1, 0)):
        _give(blocks, seq, index, physical)
    return PagedBatch(tuple(seqs), block_size, num_blocks, blocks, num_padding)


def _give(blocks: list[list[int]], seq: int, index: int, physical: int) -> None:
    """Make `physical` the block at `index` of sequence `seq`, swapping it with whichever
    sequence held it (a spare block simply changes places)."""
    for other in blocks:
        if physical in other:
            other[other.index(physical)] = blocks[seq][index]
            break
    blocks[seq][index] = physical
