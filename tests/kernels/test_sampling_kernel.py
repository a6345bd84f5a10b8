"""The Triton sampling kernel draws exactly the reference's tokens for the same seeds and
offsets (natively on a GPU, in Triton's CPU interpreter at small sizes), and the sampler
built on it samples as the sampler built on the reference, without a host sync."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("triton")

from pagoda.kernels import triton as kernels  # noqa: E402
from pagoda.ops import OpTable, reference  # noqa: E402
from pagoda.sample import Sampler, SamplingState  # noqa: E402
from pagoda.sampling_params import SamplingParams  # noqa: E402
from pagoda.testing import DTYPES, check_op, dtype_name  # noqa: E402
from pagoda.testing.op_cases import SAMPLE_SHAPES, sample_from_logits_cases  # noqa: E402

OP = "sample_from_logits"
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
def test_kernel_draws_the_reference_tokens(dtype: torch.dtype, device: str) -> None:
    for case in sample_from_logits_cases(dtype, torch.Generator().manual_seed(51)):
        on_device = {k: v.to(device) for k, v in case.args.items()}
        got = kernels.sample_from_logits(*on_device.values())
        want = reference.sample_from_logits(*case.args.values())
        assert got.dtype == torch.int64 and torch.equal(got.cpu(), want), case.label
    report = check_op(OP, kernels.sample_from_logits, dtype, device=device, seed=52)
    report.raise_for_failures()
    assert len(report.checked) == len(SAMPLE_SHAPES)


def test_greedy_rows_take_the_first_largest_logit(device: str) -> None:
    logits = torch.tensor([[0.0, 3.0, 1.0, 3.0, 3.0], [-math.inf] * 5, [2.0, 1.0, 0.0, 2.0, 1.0]])
    temperature = torch.tensor([0.0, 0.0, 0.0])
    zeros = torch.zeros(3, dtype=torch.int64, device=device)
    got = kernels.sample_from_logits(logits.to(device), temperature.to(device), zeros, zeros)
    assert got.tolist() == [1, 0, 0]


def test_frequencies_follow_the_softmax(device: str) -> None:
    if device == "cpu":
        pytest.skip("too many programs for the interpreter; it matches the reference exactly, "
                    "whose frequencies tests/sample checks")
    logits = torch.tensor([1.0, 0.5, 0.0, -0.5, 2.0, 0.3], device=device)
    rows, temperature = 100_000, 0.7
    expected = torch.softmax(logits / temperature, dim=-1).double() * rows
    for seeds, offsets in ((torch.arange(rows), torch.zeros(rows)),  # many requests
                           (torch.full((rows,), 42), torch.arange(rows))):  # one, many steps
        tokens = kernels.sample_from_logits(
            logits.expand(rows, -1), torch.full((rows,), temperature, device=device),
            seeds.to(device), offsets.long().to(device))
        counts = torch.bincount(tokens, minlength=6).double()
        assert float(((counts - expected) ** 2 / expected).sum()) < 20.52  # df 5, p = 0.001


MIXED = [
    {"temperature": 0.0},
    {"temperature": 0.8, "seed": 1},
    {"temperature": 1.3, "top_k": 20, "seed": 2},
    {"temperature": 0.7, "top_p": 0.8, "seed": 3},
    {"min_p": 0.05, "seed": -4},
    {"temperature": 0.9, "repetition_penalty": 1.3, "frequency_penalty": 0.4, "seed": 2**63 - 1},
    {"temperature": 0.0, "presence_penalty": 1.0, "logit_bias": {5: 4.0}},
    {"top_k": 5, "top_p": 0.9, "allowed_token_ids": [1, 2, 3, 8, 9], "seed": 6},
]


def _states() -> list[SamplingState]:
    return [SamplingState(SamplingParams(**p), [1, 2, 3, 4], [5, 6]) for p in MIXED]


def _kernel_table() -> OpTable:
    table = OpTable.reference()
    table.sample_from_logits = kernels.sample_from_logits
    return table


def test_sampler_on_the_kernel_samples_as_on_the_reference(device: str) -> None:
    gen = torch.Generator().manual_seed(53)
    on_kernel = Sampler(device, seed=0, ops=_kernel_table())
    on_reference = Sampler(device, seed=0, ops=OpTable.reference())
    states, reference_states = _states(), _states()
    for _ in range(3):
        logits = (torch.randn(len(MIXED), 300, generator=gen) * 2).to(device)
        got = on_kernel(logits, states).sampled_token_ids.tolist()
        assert got == on_reference(logits, reference_states).sampled_token_ids.tolist()
        for s, r, token in zip(states, reference_states, got, strict=True):
            s.output_token_ids.append(token)
            r.output_token_ids.append(token)


def test_a_sampler_step_does_not_wait_for_the_device(device: str) -> None:
    if device != "cuda":
        pytest.skip("host syncs are a GPU matter")
    sampler = Sampler(device, seed=0, ops=_kernel_table())
    states = [*_states(), SamplingState(SamplingParams(logprobs=3), [1], [])]
    logits = torch.randn(len(states) + 1, 128256, device=device)
    tokens = sampler(logits[:-1], states).sampled_token_ids.tolist()
    for s, token in zip(states, tokens, strict=True):
        s.output_token_ids.append(token)
    joining = SamplingParams(repetition_penalty=1.2, min_tokens=3, stop_token_ids=[7],
                             bad_words=["x"], seed=8)
    joining.bad_words_token_ids = [[9], [4, 5]]
    states.append(SamplingState(joining, [1, 2], [4], eos_token_id=2))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:  # counts new tokens, fills a new request's slot, every processor and the draw
        out = sampler(logits, states)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert out.sampled_token_ids.shape == (len(states),)


def test_empty_batch(device: str) -> None:
    empty = torch.empty(0, device=device)
    out = kernels.sample_from_logits(torch.empty(0, 16, device=device), empty,
                                     empty.long(), empty.long())
    assert out.shape == (0,) and out.dtype == torch.int64
