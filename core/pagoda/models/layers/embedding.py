"""Token embedding and the language-model head (optionally tied to the embedding), their
vocabulary split over the tensor-parallel ranks.

Each rank holds a contiguous block of ceil(vocab / ranks) rows; the last block is padded
with zero rows past the vocabulary. The embedding looks up the ids in its block (zero for
the others) and all-reduces; the head computes its block of logits and all-gathers them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from pagoda.distributed import TensorParallelGroup, tp_group
from pagoda.ops import current_ops
from pagoda.platforms.platform import DEFAULT_QUANTIZED_HEAD_MAX_ROWS
from pagoda.platforms.selection import resolve_platform
from pagoda.plugins.specs import ANY_PLATFORM
from pagoda.quant.tensors import GroupQuantWeight, round_activations


@dataclass(frozen=True)
class VocabShard:
    """The block of vocabulary rows one rank holds."""

    vocab_size: int
    first_row: int
    rows: int

    @classmethod
    def of(cls, vocab_size: int, tp: TensorParallelGroup) -> VocabShard:
        rows = -(-vocab_size // tp.world_size)
        return cls(vocab_size, tp.rank * rows, rows)

    def checkpoint_slice(self, tensor: torch.Tensor, shard: str | None,
                         attr: str) -> torch.Tensor:
        """This rank's rows of a whole [vocab, hidden] checkpoint table, zero-padded."""
        if tensor.shape[0] != self.vocab_size:
            raise ValueError(f"has shape {tuple(tensor.shape)}, the model expects "
                             f"{self.vocab_size} rows (its vocabulary)")
        part = tensor[self.first_row : self.first_row + self.rows]
        missing = self.rows - part.shape[0]
        return F.pad(part, (0, 0, 0, missing)) if missing else part


class VocabParallelEmbedding(nn.Module):
    """Token id -> hidden vector; weight [rows of this rank, hidden]."""

    def __init__(self, vocab_size: int, hidden_size: int, *, dtype: torch.dtype):
        super().__init__()
        self.tp = tp_group()
        self.shard = VocabShard.of(vocab_size, self.tp)
        self.checkpoint_slice = self.shard.checkpoint_slice
        self.weight = nn.Parameter(
            torch.empty(self.shard.rows, hidden_size, dtype=dtype), requires_grad=False
        )
        self._all_reduce = current_ops().all_reduce

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.tp.world_size == 1:
            return F.embedding(input_ids, self.weight)
        local = input_ids - self.shard.first_row
        outside = (local < 0) | (local >= self.shard.rows)
        hidden = F.embedding(local.masked_fill(outside, 0), self.weight)
        return self._all_reduce(hidden.masked_fill_(outside.unsqueeze(-1), 0), self.tp.group)


class ParallelLMHead(nn.Module):
    """Hidden states -> float32 logits [N, vocab]; shares the embedding's weight (and so its
    split) when `tied_to` is given. With `soft_cap` (Gemma 2's final logit soft-capping)
    the logits are soft_cap * tanh(logits / soft_cap)."""

    def __init__(
        self,
        vocab_size: int,
        hidden_size: int,
        *,
        dtype: torch.dtype,
        tied_to: VocabParallelEmbedding | None = None,
        soft_cap: float | None = None,
    ):
        super().__init__()
        self.tp = tp_group()
        self.vocab_size = vocab_size
        self.soft_cap = soft_cap
        self.shard = VocabShard.of(vocab_size, self.tp)
        self.checkpoint_slice = self.shard.checkpoint_slice
        if tied_to is not None:
            self.weight = tied_to.weight
        else:
            self.weight = nn.Parameter(
                torch.empty(self.shard.rows, hidden_size, dtype=dtype), requires_grad=False
            )
        self.dtype = dtype
        self.qweight: Any = None
        """The vocabulary table as `woq_linear`'s weight, when it came quantized
        (`keep_quantized`); the head then runs on it instead of `weight`."""
        self._linear = current_ops().linear
        self._woq_linear: Any = None
        self._act_block: int | None = None
        self.quantized_max_rows = 0
        """Steps of up to this many rows run on `qweight` (the platform's
        `quantized_head_max_rows`), larger ones on the dense table."""

    def keep_quantized(self, table: GroupQuantWeight) -> None:
        """Run the head on `table`'s codes (a GGUF's quantized vocabulary table, which a
        tied embedding holds dense for its lookups) through the platform's `woq_linear`
        for steps of up to the platform's `quantized_head_max_rows`; on one rank only (each would need
        its block of the codes, not done), where the platform offers the op. Where the
        table rounds its activations (`GroupQuantWeight.act_block`), the dense table's
        steps round them too: a sequence's logits do not depend on its step's size."""
        ops = current_ops()
        if self.tp.world_size == 1 and "woq_linear" in ops.prepare:  # else stays dense
            self._woq_linear = ops.woq_linear
            self.qweight = ops.prepare["woq_linear"](table, self.dtype)
            self._act_block = table.act_block
            self.quantized_max_rows = _quantized_head_max_rows(ops.platform, self.dtype)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if self.qweight is not None and hidden_states.shape[0] <= self.quantized_max_rows:
            logits = self._woq_linear(hidden_states, self.qweight).float()
        else:
            if self._act_block:
                hidden_states = round_activations(
                    hidden_states, self._act_block).to(hidden_states.dtype)
            logits = self._linear(hidden_states, self.weight).float()
        if self.soft_cap is not None:
            logits = torch.tanh(logits / self.soft_cap) * self.soft_cap
        if self.tp.world_size == 1:
            return logits
        return self.tp.all_gather(logits, dim=-1)[..., : self.vocab_size]


def _quantized_head_max_rows(platform: str, dtype: torch.dtype) -> int:
    """`Platform.quantized_head_max_rows` of the op table's platform (the interface's
    default for the reference table, which runs anywhere)."""
    if platform == ANY_PLATFORM:
        return DEFAULT_QUANTIZED_HEAD_MAX_ROWS
    return resolve_platform(platform).quantized_head_max_rows(dtype)
