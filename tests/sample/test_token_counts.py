"""TokenCounts keeps the penalties' token statistics across steps, adding only new tokens,
and always agrees with counting the full token lists afresh."""

import gc
import random

import torch

from pagoda.sample import SamplingBatch
from pagoda.sample.token_counts import TokenCounts

VOCAB = 50


def _expected(state) -> tuple[torch.Tensor, torch.Tensor]:
    known = [t for t in state.output_token_ids if t >= 0]
    counts = torch.bincount(torch.tensor(known, dtype=torch.int64), minlength=VOCAB).float()
    in_prompt = torch.zeros(VOCAB, dtype=torch.bool)
    in_prompt[state.prompt_token_ids] = True
    return counts, in_prompt


def _check(counts: TokenCounts, states) -> list[int]:
    slots = counts.update(states)
    for state, slot in zip(states, slots, strict=True):
        want_counts, want_prompt = _expected(state)
        assert torch.equal(counts.output_counts[slot], want_counts)
        if state.params.repetition_penalty != 1.0:  # the only user of the prompt's tokens
            assert torch.equal(counts.in_prompt[slot], want_prompt)
    return slots


def test_incremental_counts_match_full_counts_over_many_steps(state):
    rng = random.Random(0)
    states = [state(prompt=[rng.randrange(VOCAB) for _ in range(rng.randrange(1, 30))],
                    output=[rng.randrange(VOCAB) for _ in range(rng.randrange(0, 10))],
                    repetition_penalty=1.3, frequency_penalty=0.5) for _ in range(12)]
    counts = TokenCounts(VOCAB, torch.device("cpu"))
    for step in range(6):
        _check(counts, states[: 6 + step])  # requests join
        for s in states:
            s.output_token_ids += [rng.randrange(VOCAB) for _ in range(rng.randrange(3))]
    assert len(counts.output_counts) == 16  # grown from 8 once, not per step


def test_tokens_in_flight_are_counted_once_filled_in(state):
    s = state(prompt=[1], output=[4, 4], presence_penalty=1.0)
    counts = TokenCounts(VOCAB, torch.device("cpu"))
    _check(counts, [s])
    s.output_token_ids += [-1]  # the runner's placeholder for a token not read back yet
    _check(counts, [s])
    s.output_token_ids[-1] = 7
    s.output_token_ids += [-1]
    _check(counts, [s])
    s.output_token_ids[-1] = 4
    assert counts.output_counts[_check(counts, [s])[0], 4] == 3


def test_replaced_or_shortened_lists_are_counted_afresh(state):
    s = state(prompt=[2], output=[5, 6, 7], frequency_penalty=1.0)
    counts = TokenCounts(VOCAB, torch.device("cpu"))
    _check(counts, [s])
    s.output_token_ids.clear()
    s.output_token_ids.append(9)
    _check(counts, [s])
    s.output_token_ids = [1, 1]
    _check(counts, [s])


def test_slots_of_dropped_requests_are_reused(state):
    states = [state(prompt=[i], output=[i, i], repetition_penalty=2.0) for i in range(8)]
    counts = TokenCounts(VOCAB, torch.device("cpu"))
    slots = _check(counts, states)
    freed = slots[3]
    del states[3]
    gc.collect()
    newcomer = state(prompt=[40], output=[41], repetition_penalty=2.0)
    assert _check(counts, [*states, newcomer])[-1] == freed
    assert len(counts.output_counts) == 8


def test_a_sampler_batch_with_kept_counts_equals_a_fresh_one(state):
    rng = random.Random(1)
    states = [state(prompt=[1, 2, 3], output=[rng.randrange(VOCAB) for _ in range(5)],
                    repetition_penalty=1.2, presence_penalty=0.4) if i % 2 else state()
              for i in range(6)]
    counts = TokenCounts(VOCAB, torch.device("cpu"))
    for _ in range(4):
        kept = SamplingBatch.from_states(states, VOCAB, "cpu", counts).penalties
        fresh = SamplingBatch.from_states(states, VOCAB, "cpu").penalties
        assert torch.equal(kept.rows, fresh.rows)
        assert torch.equal(kept.output_counts, fresh.output_counts)
        assert torch.equal(kept.seen_in_prompt, fresh.seen_in_prompt)
        for s in states:
            s.output_token_ids.append(rng.randrange(VOCAB))
