"""The `apply_token_bitmask` op: its reference against xgrammar's own kernel, and the
sampler applying it to the rows that have a grammar only."""

from __future__ import annotations

import math

import pytest
import torch
import xgrammar as xgr

from pagoda.ops import reference
from pagoda.sample import Sampler, SamplingState
from pagoda.sampling_params import SamplingParams
from pagoda.testing.op_cases import apply_token_bitmask_cases
from pagoda.testing.op_conformance import check_op


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reference_matches_xgrammar(dtype):
    for case in apply_token_bitmask_cases(dtype, torch.Generator().manual_seed(5)):
        logits, bitmask = case.args["logits"], case.args["bitmask"]
        got = reference.apply_token_bitmask(logits, bitmask)
        covered = min(logits.shape[1], bitmask.shape[1] * 32)
        want = logits.clone()
        xgr.apply_token_bitmask_inplace(want, bitmask, vocab_size=covered)
        want[:, covered:] = -math.inf  # past the bitmask: not allowed (xgrammar leaves them)
        assert torch.equal(got, want), case.label


def test_reference_passes_its_own_conformance_cases():
    report = check_op("apply_token_bitmask", reference.apply_token_bitmask, torch.float32)
    assert report.ok, report.failures


def test_sampler_masks_only_the_rows_with_a_grammar():
    vocab = 100
    logits = torch.randn(3, vocab, generator=torch.Generator().manual_seed(0))
    allowed = torch.tensor([17, 70])
    bitmask = torch.zeros(1, 4, dtype=torch.int32)
    for token in allowed.tolist():
        bitmask[0, token // 32] |= 1 << (token % 32)
    logits[1, allowed] = -10.0  # the grammar's tokens are far from the row's best
    states = [SamplingState(SamplingParams(temperature=0.0), [5]) for _ in range(3)]
    out = Sampler(seed=0)(logits, states, ([1], bitmask)).sampled_token_ids
    assert out[1].item() in allowed.tolist()
    assert out[0].item() == logits[0].argmax().item()
    assert out[2].item() == logits[2].argmax().item()
    seeded = [SamplingState(SamplingParams(temperature=1.0, seed=i), [5]) for i in range(3)]
    for _ in range(20):
        assert Sampler()(logits, seeded, ([1], bitmask)).sampled_token_ids[1].item() in allowed
