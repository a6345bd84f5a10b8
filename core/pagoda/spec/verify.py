"""Verification of drafts by rejection sampling, which leaves the output distribution
unchanged.

At each draft position, p is the distribution the request samples from there (after
temperature, top-k/p, min-p and the other processors) and q the proposer's (a draft
model's, processed the same way; a deterministic proposer such as prompt lookup has q
one-hot at its token). Draft t is accepted with probability min(1, p(t) / q(t)); on
rejection the position's token is drawn from max(0, p - q), renormalised, and the later
drafts are dropped; when all are accepted, the position after them is drawn from p (the
bonus token). Then every output token is distributed as p says. Greedy rows take the
argmax of p, so they accept the drafts that equal it (a greedy draft model proposes its
own argmax).

`verified_draws` computes, on the device, each draft position's outcome as one token (the
draft, or the token drawn instead); the host then keeps the drafts equal to theirs
(`accepted_tokens`). It takes tensors but imports no torch: this package stays light.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pagoda.sampling_params import SamplingParams

if TYPE_CHECKING:
    from torch import Tensor


def can_speculate(params: SamplingParams | None) -> bool:
    """Whether a request's drafts can be verified by `accepted_tokens` as things stand:
    not for pooling, nor where the next token's distribution depends on state the
    verification does not replay per draft position (a grammar's matcher, a thinking
    budget, penalties' and bad words' token counts), nor with logprobs (one entry a step)."""
    return params is not None and not (
        params.structured_outputs is not None or params.thinking_budget is not None
        or params.has_penalties or params.bad_words_token_ids or params.logprobs is not None)


def accepted_tokens(sampled: list[int], drafts: list[int]) -> list[int]:
    """A request's new tokens from its `len(drafts) + 1` sampled ones (sampled[j]: drawn
    at the position after drafts[:j]): the drafts that match their draw, then the first
    draw that differs, or after all of them the draw at the last position (the bonus)."""
    assert len(sampled) == len(drafts) + 1
    for j, draft in enumerate(drafts):
        if sampled[j] != draft:
            return sampled[: j + 1]
    return sampled


def verified_draws(target: Tensor, drafts: Tensor, draft_probs: Tensor | None,
                   uniforms: Tensor, redraw: Callable[[Tensor], Tensor]) -> Tensor:
    """Per draft position (row), the draft when accepted, else the token drawn instead.

    target: p [N, V] (float32, rows sum to 1); drafts: t [N] int64; draft_probs: q [N, V],
    None for a deterministic proposer (q one-hot at t); uniforms: [N] in (0, 1), the
    acceptance draws, independent of the drafts and of `redraw`; redraw: one token per row
    of nonnegative weights [N, V] (drawn with probability proportional to them)."""
    index = drafts.unsqueeze(1)
    q = target.new_zeros(target.shape).scatter_(1, index, 1.0) if draft_probs is None \
        else draft_probs.float()
    accept = uniforms * q.gather(1, index).squeeze(1) < target.gather(1, index).squeeze(1)
    residual = (target - q).clamp_min(0)
    # Rounding may reject where p == q, leaving no residual: p is then the residual's limit.
    residual = residual.where(residual.sum(dim=1, keepdim=True) > 0, target)
    return drafts.where(accept, redraw(residual))
