"""Decode steps replayed from device graphs: one capture per padded step size.

A step where every sequence computes at most `query_len` tokens (1: plain decoding; 1 + k:
the verification of k drafts of speculative decoding) is padded up to the next captured
token count and replayed with one call, instead of launching every kernel of every layer
from Python. The step's tokens keep their rows; padding tokens follow them, each a
sequence of its own that writes no KV (slot -1) and attends to nothing (sequence length
0), and their outputs are dropped. A captured step holds as many sequences as tokens, so
any step of at most that many tokens fits.

Plain decode graphs take any backend that `supports_graph_capture`. Graphs of several
tokens a sequence replay steps whose tokens are split among their sequences in any way
(some requests verify fewer drafts than others), so they need a backend that
`supports_multi_token_graphs`.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from pagoda.attention.backend import AttentionMetadata, AttentionMetadataBuilder
from pagoda.platforms.graphs import GraphCapture
from pagoda.worker.step_inputs import StepInputs

logger = logging.getLogger(__name__)


def default_capture_sizes(max_batch_size: int) -> list[int]:
    """1, 2, 4, then every 8 up to 128, every 16 up to 256, every 32 up to 512, every 64
    beyond, and `max_batch_size` itself: padding adds at most 1/8 to a step above 64."""
    sizes = [1, 2, 4, *range(8, 129, 8), *range(144, 257, 16), *range(288, 513, 32),
             *range(576, max_batch_size + 1, 64)]
    return sorted({s for s in sizes if s < max_batch_size} | {max_batch_size})


@dataclass
class _Graph:
    replay: Callable[[], None]
    hidden: torch.Tensor  # [size, hidden], written by each replay


class DecodeGraphs:
    """Static input buffers and one captured forward pass per step size (in tokens)."""

    def __init__(
        self,
        model: nn.Module,
        kv_caches: list[torch.Tensor],
        builder: AttentionMetadataBuilder,
        capture: GraphCapture,
        sizes: list[int],
        max_blocks_per_seq: int,
        block_size: int,
        device: torch.device,
        query_len: int = 1,
    ):
        """`sizes`: the token counts captured; `query_len`: the most tokens a sequence of
        a replayed step computes."""
        self.model = model
        self.kv_caches = kv_caches
        self.builder = builder
        self.capture_api = capture
        self.sizes = sorted(sizes)
        self.block_size = block_size
        self.query_len = query_len
        n = self.sizes[-1]
        self.input_ids = torch.zeros(n, dtype=torch.int64, device=device)
        self.positions = torch.zeros(n, dtype=torch.int64, device=device)
        self.slot_mapping = torch.full((n,), -1, dtype=torch.int64, device=device)
        self.block_tables = torch.zeros(n, max_blocks_per_seq, dtype=torch.int32, device=device)
        self.seq_lens = torch.zeros(n, dtype=torch.int32, device=device)
        self.query_start_loc = torch.arange(n + 1, dtype=torch.int32, device=device)
        self._counts = torch.arange(2 * n + 2, dtype=torch.int32, device=device)
        """0, 1, 2, ...: padding sequences' query starts are a slice of it."""
        self.graphs: dict[int, _Graph] = {}

    @property
    def max_num_tokens(self) -> int:
        return self.sizes[-1]

    def padded_size(self, num_tokens: int) -> int | None:
        """The captured size a step of `num_tokens` tokens runs at, if any."""
        i = bisect.bisect_left(self.sizes, num_tokens)
        return self.sizes[i] if i < len(self.sizes) else None

    def can_run(self, inputs: StepInputs) -> bool:
        meta = inputs.metadata
        return (meta.max_query_len <= self.query_len and bool(self.graphs)
                and inputs.input_ids.shape[0] <= self.max_num_tokens
                and meta.block_tables.shape[1] <= self.block_tables.shape[1])

    def _metadata(self, size: int) -> AttentionMetadata:
        """Metadata over the static buffers; host fields are the capture's worst case so
        that launch parameters chosen from them hold for every replay."""
        return self.builder.build(AttentionMetadata(
            num_tokens=size,
            slot_mapping=self.slot_mapping[:size],
            block_tables=self.block_tables[:size],
            query_start_loc=self.query_start_loc[: size + 1],
            seq_lens=self.seq_lens[:size],
            query_start_loc_cpu=list(range(size + 1)),
            seq_lens_cpu=[self.block_tables.shape[1] * self.block_size] * size,
            max_query_len=self.query_len,
            max_seq_len=self.block_tables.shape[1] * self.block_size,
        ))

    def _forward(self, size: int) -> torch.Tensor:
        return self.model(self.input_ids[:size], self.positions[:size], self.kv_caches,
                          self._metadata(size))

    @torch.inference_mode()
    def capture_all(self, pool: Any = None) -> Any:
        """Capture every size, largest first so that smaller graphs reuse its memory, into
        `pool` (None: a new one); returns the pool, which other graphs may share."""
        start = time.perf_counter()
        pool = self.capture_api.new_pool() if pool is None else pool
        for size in reversed(self.sizes):
            self._forward(size)  # warm-up outside the graph: compiles kernels, sets up libraries
            replay, hidden = self.capture_api.capture(lambda s=size: self._forward(s), pool)
            self.graphs[size] = _Graph(replay, hidden)
        logger.info("Captured %d graphs of steps of up to %d token(s) a sequence (%d..%d "
                    "tokens) in %.1f s", len(self.sizes), self.query_len, self.sizes[0],
                    self.sizes[-1], time.perf_counter() - start)
        return pool

    def run(self, inputs: StepInputs) -> torch.Tensor:
        """Hidden states [num_tokens, hidden] of the step (see `can_run`)."""
        meta = inputs.metadata
        t, n = inputs.input_ids.shape[0], meta.num_seqs
        size = self.padded_size(t)
        assert size is not None
        width = meta.block_tables.shape[1]
        self.input_ids[:t].copy_(inputs.input_ids, non_blocking=True)
        self.positions[:t].copy_(inputs.positions, non_blocking=True)
        self.slot_mapping[:t].copy_(meta.slot_mapping, non_blocking=True)
        self.block_tables[:n, :width].copy_(meta.block_tables, non_blocking=True)
        self.seq_lens[:n].copy_(meta.seq_lens, non_blocking=True)
        if self.query_len > 1:
            # The step's own split, then sequences n, n + 1, ... owning one padding token
            # each (tokens t, t + 1, ...) and those past the last padding token none. (With
            # one token a sequence that is 0, 1, 2, ... whatever the step: left as captured.)
            self.query_start_loc[: n + 1].copy_(meta.query_start_loc, non_blocking=True)
            torch.clamp(self._counts[t + 1 : t + 1 + size - n], max=size,
                        out=self.query_start_loc[n + 1 : size + 1])
        if size > n:
            self.slot_mapping[t:size].fill_(-1)
            self.seq_lens[n:size].fill_(0)
        graph = self.graphs[size]
        graph.replay()
        return graph.hidden[:t]


def replay(graphs: Sequence[DecodeGraphs], inputs: StepInputs) -> torch.Tensor | None:
    """The step's hidden states from the first of `graphs` that can run it, or None."""
    for family in graphs:
        if family.can_run(inputs):
            return family.run(inputs)
    return None
