"""The verification of drafts (`Sampler.propose`, `Sampler.verify`) on many rows of one
position: the tokens out are distributed as the target p, whatever the drafts' q, and
drafts are accepted as often as the rule says (sum of min(p, q); p(t) for a deterministic
proposer's t)."""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare

from pagoda.sample import Sampler

ROWS = 20000
P = torch.tensor([0.5, 0.3, 0.1, 0.1])
Q = torch.tensor([0.1, 0.2, 0.3, 0.4])


def _logits(probs: torch.Tensor) -> torch.Tensor:
    return probs.log().expand(ROWS, -1).clone()


def _is_distributed_as(tokens: torch.Tensor, probs: torch.Tensor) -> bool:
    counts = torch.bincount(tokens, minlength=len(probs)).double()
    expected = probs.double() / probs.double().sum() * len(tokens)
    return chisquare(counts.numpy(), expected.numpy()).pvalue > 1e-3


@pytest.mark.parametrize("seeded", [False, True])
def test_a_draft_models_drafts_verified_are_distributed_as_the_target(state, seeded):
    sampler = Sampler(seed=0)
    states = [state(temperature=1.0, seed=i if seeded else None) for i in range(ROWS)]
    drafts, q = sampler.propose(_logits(Q), states)
    assert q is not None and torch.allclose(q, Q.expand(ROWS, -1), atol=1e-6)
    assert _is_distributed_as(drafts, Q)
    target = _logits(P)
    out = sampler.verify(target, states, drafts, q, sampler(target, states).sampled_token_ids)
    assert _is_distributed_as(out, P)
    accepted = (out == drafts).double().mean().item()
    # Accepted: sum min(p, q) = 0.5; a rejection's redraw is never the draft (p(t) < q(t)).
    assert abs(accepted - torch.minimum(P, Q).sum().item()) < 0.02


def test_a_deterministic_proposers_drafts_are_the_one_hot_case(state):
    sampler = Sampler(seed=0)
    states = [state(temperature=1.0) for _ in range(ROWS)]
    drafts = torch.full((ROWS,), 2)
    target = _logits(P)
    out = sampler.verify(target, states, drafts, None, sampler(target, states).sampled_token_ids)
    assert _is_distributed_as(out, P)
    assert abs((out == 2).double().mean().item() - P[2].item()) < 0.01


def test_greedy_rows_keep_their_argmax_and_seeded_rows_their_outcome(state):
    """Greedy rows: the draw (argmax), whatever the draft; a seeded row's outcome is the
    same alone or in a batch."""
    sampler = Sampler(seed=0)
    greedy, seeded = state(temperature=0.0), state(temperature=1.0, seed=7, output=[3, 3])
    logits = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    states = [greedy, seeded, state(temperature=1.0)] * 2
    drafts = torch.tensor([1, 1, 1, 2, 2, 2])
    drawn = sampler(logits, states).sampled_token_ids
    out = sampler.verify(logits, states, drafts, None, drawn)
    assert out[0] == logits[0].argmax() and out[3] == logits[3].argmax()
    alone = sampler.verify(logits[1:2], [seeded], drafts[1:2], None, drawn[1:2])
    assert out[1] == alone[0]
