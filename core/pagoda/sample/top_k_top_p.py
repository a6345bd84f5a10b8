"""Truncation of the distribution: per-row top-k, top-p (nucleus) and min-p."""

from __future__ import annotations

import torch
from torch import Tensor

_NEG_INF = float("-inf")


def apply_top_k(logits: Tensor, top_k: Tensor, max_top_k: int) -> Tensor:
    """Keep each row's `top_k` largest logits (ties at the cut are kept); rows with
    top_k >= V are unchanged. Uses topk(max_top_k) rather than a full sort."""
    vocab_size = logits.shape[-1]
    top_values = logits.topk(max_top_k, dim=-1).values
    cut = top_values.gather(1, (top_k.clamp(max=max_top_k) - 1).unsqueeze(1))
    cut.masked_fill_((top_k >= vocab_size).unsqueeze(1), _NEG_INF)
    return logits.masked_fill(logits < cut, _NEG_INF)


def apply_top_k_top_p(logits: Tensor, top_k: Tensor | None, top_p: Tensor) -> Tensor:
    """Top-k (when given) then top-p with one ascending sort: keep the smallest set of
    most likely tokens whose probability reaches `top_p`, always the most likely one."""
    sorted_logits, order = logits.sort(dim=-1, descending=False)
    if top_k is not None:
        first_kept = (logits.shape[-1] - top_k).unsqueeze(1)
        cut = sorted_logits.gather(1, first_kept)
        sorted_logits.masked_fill_(sorted_logits < cut, _NEG_INF)
    cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    drop = cumulative <= 1 - top_p.unsqueeze(1)
    drop[:, -1] = False
    sorted_logits.masked_fill_(drop, _NEG_INF)
    return torch.empty_like(logits).scatter_(1, order, sorted_logits)


def apply_min_p(logits: Tensor, min_p: Tensor) -> Tensor:
    """Drop tokens whose probability is below min_p [B, 1] times the row's largest."""
    probs = logits.softmax(dim=-1)
    cut = probs.amax(dim=-1, keepdim=True) * min_p
    return logits.masked_fill(probs < cut, _NEG_INF)
