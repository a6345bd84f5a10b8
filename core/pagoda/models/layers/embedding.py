"""Token embedding and the language-model head (optionally tied to the embedding)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pagoda.ops import current_ops


class VocabEmbedding(nn.Module):
    """Token id -> hidden vector; weight [vocab, hidden]."""

    def __init__(self, vocab_size: int, hidden_size: int, *, dtype: torch.dtype):
        super().__init__()
        self.weight = nn.Parameter(
            torch.empty(vocab_size, hidden_size, dtype=dtype), requires_grad=False
        )

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(input_ids, self.weight)


class LMHead(nn.Module):
    """Hidden states -> float32 logits; shares the embedding's weight when `tied_to` is given."""

    def __init__(
        self,
        vocab_size: int,
        hidden_size: int,
        *,
        dtype: torch.dtype,
        tied_to: VocabEmbedding | None = None,
    ):
        super().__init__()
        if tied_to is not None:
            self.weight = tied_to.weight
        else:
            self.weight = nn.Parameter(
                torch.empty(vocab_size, hidden_size, dtype=dtype), requires_grad=False
            )
        self._linear = current_ops().linear

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self._linear(hidden_states, self.weight).float()
