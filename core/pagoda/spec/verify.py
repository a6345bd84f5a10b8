"""Verification of a deterministic proposer's drafts (draft probability 1 for its token).

The rejection-sampling rule accepts draft t with probability p(t), p being the
distribution the request samples from at that position (after temperature, top-k/p,
min-p and the other processors), and on rejection samples from p without t,
renormalised. Drawing x ~ p and accepting t when x == t is that rule: acceptance has
probability p(t), and a rejected draw is distributed as p given x != t. So the runner
samples every draft position as it would without speculation (the same seeded draw
numbers), and the output distribution is exactly that of plain sampling; greedy rows
take the argmax, so they accept the drafts that equal it.
"""

from __future__ import annotations

from pagoda.sampling_params import SamplingParams


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
