"""Logprobs of chosen tokens, their ranks and the top-k alternatives, as tensors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor


class LogprobsLists(NamedTuple):
    """Host copy of `LogprobsTensors`: per row, the chosen token first, then the top-k."""

    token_ids: list[list[int]]
    logprobs: list[list[float]]
    ranks: list[int]


class LogprobsTensors(NamedTuple):
    """token_ids and logprobs are [N, 1 + k] (chosen token first, then the top-k by
    logprob); ranks [N] is 1 + the number of tokens with a strictly larger logprob."""

    token_ids: Tensor
    logprobs: Tensor
    ranks: Tensor

    def tolists(self, num_top: Sequence[int] | None = None) -> LogprobsLists:
        """Copy to the host; row i keeps 1 + num_top[i] entries when num_top is given
        (a batch computes the largest k any row asked for)."""
        token_ids, logprobs = self.token_ids.tolist(), self.logprobs.tolist()
        if num_top is not None:
            token_ids = [row[: 1 + k] for row, k in zip(token_ids, num_top, strict=True)]
            logprobs = [row[: 1 + k] for row, k in zip(logprobs, num_top, strict=True)]
        return LogprobsLists(token_ids, logprobs, self.ranks.tolist())


def compute_logprobs(logits: Tensor, token_ids: Tensor, k: int) -> LogprobsTensors:
    """Under log_softmax(logits [N, V]): logprob and rank of token_ids [N], and the top-k."""
    logprobs = logits.float().log_softmax(dim=-1)
    token_ids = token_ids.long().unsqueeze(1)
    chosen = logprobs.gather(1, token_ids)
    ranks = (logprobs > chosen).sum(dim=-1) + 1
    if k == 0:
        return LogprobsTensors(token_ids, chosen, ranks)
    top = logprobs.topk(k, dim=-1)
    return LogprobsTensors(torch.cat((token_ids, top.indices), dim=1),
                           torch.cat((chosen, top.values), dim=1), ranks)


def compute_prompt_logprobs(logits: Tensor, target_token_ids: Tensor, k: int) -> LogprobsTensors:
    """Prompt logprobs: row i of logits [N, V] scores the next prompt token
    target_token_ids[i]; rows are the positions whose next token is in the prompt."""
    return compute_logprobs(logits, target_token_ids, k)
