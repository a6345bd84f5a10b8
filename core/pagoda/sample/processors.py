"""Logits processors, applied in place in vLLM's order before greedy/random selection."""

from __future__ import annotations

import torch
from torch import Tensor

from pagoda.sample.batch import Penalties, SamplingBatch


def apply_penalties(logits: Tensor, penalties: Penalties) -> None:
    """Repetition penalty over prompt and output tokens (positive logits are divided,
    others multiplied), then frequency and presence penalties over output tokens."""
    rows = penalties.rows
    sub = logits[rows]
    counts = penalties.output_counts
    if penalties.repetition is not None:
        seen = penalties.seen_in_prompt | (counts > 0)
        factor = torch.where(seen, penalties.repetition, 1.0)
        sub = torch.where(sub > 0, sub / factor, sub * factor)
    if penalties.frequency is not None:
        sub -= penalties.frequency * counts
    if penalties.presence is not None:
        sub -= penalties.presence * (counts > 0)
    logits[rows] = sub


def apply_logits_processors(logits: Tensor, batch: SamplingBatch) -> None:
    """allowed_token_ids, bad words and min_tokens masks, logit_bias, then penalties."""
    if batch.disallowed is not None:
        rows, mask = batch.disallowed
        logits[rows] = logits[rows].masked_fill(mask, float("-inf"))
    if batch.banned is not None:  # a value made on the device: a Python one syncs
        banned = batch.banned
        logits.index_put_((banned.rows, banned.cols), logits.new_full((), float("-inf")))
    if batch.logit_bias is not None:
        bias = batch.logit_bias
        logits.index_put_((bias.rows, bias.cols), bias.values, accumulate=True)
    if batch.penalties is not None:
        apply_penalties(logits, batch.penalties)
