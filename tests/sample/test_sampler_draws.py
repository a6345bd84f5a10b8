import math

import pytest
import torch

from pagoda.ops import OpTable, reference, use_ops
from pagoda.sample import Sampler, SamplingState
from pagoda.sampling_params import SamplingParams


def chi_square(tokens: torch.Tensor, probs: torch.Tensor) -> float:
    counts = torch.bincount(tokens, minlength=probs.numel()).double()
    expected = probs.double() * tokens.numel()
    return float(((counts - expected) ** 2 / expected).sum())


CHI2_DF5_P001 = 20.52  # chi-square critical value, 5 degrees of freedom, p = 0.001


def crafted_logits(rows: int) -> torch.Tensor:
    """p = 0.5, 0.3, then 0.2 spread evenly over 98 tail tokens."""
    probs = torch.cat((torch.tensor([0.5, 0.3]), torch.full((98,), 0.2 / 98)))
    return probs.log().expand(rows, -1).clone()


def test_greedy_is_argmax(state):
    logits = torch.randn(8, 100, generator=torch.Generator().manual_seed(0))
    out = Sampler()(logits, [state(temperature=0.0, top_k=3, top_p=0.5) for _ in range(8)])
    assert torch.equal(out.sampled_token_ids, logits.argmax(dim=-1))
    assert out.sampled_token_ids.dtype == torch.int64 and out.logprobs is None


def test_top_k_1_equals_greedy(state):
    logits = torch.randn(8, 100, generator=torch.Generator().manual_seed(1))
    states = [state(temperature=1.5, top_k=1, seed=i if i % 2 else None) for i in range(8)]
    sampler = Sampler(seed=0)
    for _ in range(5):
        assert torch.equal(sampler(logits, states).sampled_token_ids, logits.argmax(dim=-1))


TRUNCATIONS = [{"top_k": 2}, {"top_p": 0.7}, {"min_p": 0.4}, {"top_k": 50, "top_p": 0.7},
               {"top_k": 3, "min_p": 0.4}, {"top_p": 0.9, "min_p": 0.5}]


@pytest.mark.parametrize("kinds", [TRUNCATIONS, [{"top_k": 2}, {"top_k": 2, "seed": 5}]],
                         ids=["mixed", "top_k_only"])
def test_truncation_keeps_only_allowed_tokens(state, kinds):
    per_kind = 2000
    kinds = [*kinds, {}]  # the last, untruncated rows must still reach the tail
    states = [state(**kinds[i % len(kinds)]) for i in range(per_kind * len(kinds))]
    tokens = Sampler(seed=0)(crafted_logits(len(states)), states).sampled_token_ids
    tokens = tokens.view(per_kind, len(kinds))
    for column, kind in enumerate(kinds[:-1]):
        col = tokens[:, column]
        assert set(col.tolist()) <= {0, 1}, kind
        if "seed" not in kind:  # seeded rows all share one seed: one token
            assert abs((col == 0).float().mean().item() - 0.5 / 0.8) < 0.04, kind
    assert abs((tokens[:, -1] >= 2).float().mean().item() - 0.2) < 0.03


@pytest.mark.parametrize("seeded", [False, True])
def test_temperature_frequencies_match_softmax(state, seeded):
    logits = torch.tensor([1.0, 0.5, 0.0, -0.5, 2.0, 0.3])
    temperature, rows = 0.7, 6000
    states = [state(temperature=temperature, seed=i if seeded else None) for i in range(rows)]
    tokens = Sampler(seed=1)(logits.expand(rows, -1).clone(), states).sampled_token_ids
    assert chi_square(tokens, torch.softmax(logits / temperature, dim=-1)) < CHI2_DF5_P001


def test_min_p_threshold_is_relative_to_the_top_probability(state):
    probs = torch.tensor([0.4, 0.3, 0.2, 0.1])  # min_p 0.3: keep p >= 0.12
    rows = 6000
    states = [state(min_p=0.3) for _ in range(rows)]
    tokens = Sampler(seed=2)(probs.log().expand(rows, -1).clone(), states).sampled_token_ids
    assert 3 not in tokens.tolist()
    kept = torch.tensor([0.4, 0.3, 0.2, 0.0]) / 0.9
    counts = torch.bincount(tokens, minlength=4)[:3].double()
    expected = kept[:3].double() * rows
    assert float(((counts - expected) ** 2 / expected).sum()) < 13.8  # df 2, p = 0.001


def _run(sampler: Sampler, logits: torch.Tensor, states: list[SamplingState], row: int,
         steps: int) -> list[int]:
    """Sample `steps` tokens, appending each row's token; return row `row`'s tokens."""
    for _ in range(steps):
        tokens = sampler(logits, states).sampled_token_ids.tolist()
        for s, token in zip(states, tokens, strict=True):
            s.output_token_ids.append(token)
    return states[row].output_token_ids[-steps:]


def test_seeded_request_is_batch_invariant(state):
    vocab = 1000
    gen = torch.Generator().manual_seed(3)
    row_logits = torch.randn(1, vocab, generator=gen)
    seeded = {"temperature": 0.9, "top_p": 0.95, "seed": 1234, "prompt": [5, 6]}
    alone = _run(Sampler(seed=0), row_logits, [state(**seeded)], 0, steps=6)
    others = [state(), state(temperature=0.0), state(seed=99, top_k=5),
              state(temperature=1.3, min_p=0.05, repetition_penalty=1.2)]
    for position in (0, 2, 4):
        states = [*others[:position], state(**seeded), *others[position:]]
        logits = torch.randn(len(states), vocab, generator=gen)
        logits[position] = row_logits[0]
        assert _run(Sampler(seed=position), logits, states, position, steps=6) == alone
        for s in others:
            s.output_token_ids.clear()
    assert len(set(alone)) > 1  # the draw changes from step to step


def test_seeded_draw_repeats_for_same_output_length_and_after_recompute():
    logits = torch.randn(1, 500, generator=torch.Generator().manual_seed(4))
    params = SamplingParams(temperature=1.0, seed=7)
    s = SamplingState(params, [1, 2, 3], [10, 11])
    first = Sampler(seed=0)(logits, [s]).sampled_token_ids.tolist()
    assert Sampler(seed=1)(logits, [s]).sampled_token_ids.tolist() == first
    recomputed = SamplingState(params.clone(), [1, 2, 3], [10, 11])
    assert Sampler(seed=2)(logits, [recomputed]).sampled_token_ids.tolist() == first
    other_seeds = {Sampler()(logits, [SamplingState(params.with_seed(seed), [1], [10, 11])])
                   .sampled_token_ids.item() for seed in range(8)}
    assert len(other_seeds) > 1


def test_unseeded_draws_follow_the_engine_seed(state):
    logits = torch.randn(16, 300, generator=torch.Generator().manual_seed(5))
    states = [state() for _ in range(16)]
    a, b = Sampler(seed=11), Sampler(seed=11)
    for _ in range(3):
        assert torch.equal(a(logits, states).sampled_token_ids,
                           b(logits, states).sampled_token_ids)


def test_masked_tokens_are_never_drawn(state):
    """A token masked to -inf (probability 0) must lose the race even to tiny q."""
    logits = torch.full((4000, 3), -math.inf)
    logits[:, 1] = 0.0
    tokens = Sampler(seed=0)(logits, [state() for _ in range(4000)]).sampled_token_ids
    assert (tokens == 1).all()


def test_the_draw_is_the_op_of_the_table_current_at_construction(state):
    calls = []

    def spy(logits, temperature, seeds, offsets):
        calls.append(temperature.tolist())
        return reference.sample_from_logits(logits, temperature, seeds, offsets)

    table = OpTable.reference()
    table.sample_from_logits = spy
    with use_ops(table):
        sampler = Sampler(seed=0)
    logits = torch.randn(2, 10, generator=torch.Generator().manual_seed(6))
    tokens = sampler(logits, [state(temperature=0.5), state(temperature=0.0)]).sampled_token_ids
    assert calls == [[0.5, 0.0]] and tokens[1] == logits[1].argmax()
    sampler(logits, [state(temperature=0.0)] * 2)  # all greedy: a plain argmax
    Sampler(seed=0)(logits, [state(temperature=0.5)] * 2)  # built outside: the reference
    Sampler(seed=0, ops=table)(logits, [state(temperature=0.5, top_p=0.9)])  # scaled first
    assert calls == [[0.5, 0.0], [1.0]]


def test_seeded_batch_inputs_start_aligned(state):
    """The seeds and draw numbers a seeded batch gives the sampling kernel start at 16-byte
    boundaries for odd batch sizes too: Triton compiles a kernel once per alignment of each
    pointer, so an offset that followed the batch size compiled new variants mid-run. The
    values are the states' own."""
    from pagoda.sample.batch import SamplingBatch

    for size in (1, 3, 4, 7):
        states = [state(temperature=1.0, seed=10 + i, output=[1] * i) for i in range(size)]
        batch = SamplingBatch.from_states(states, 100, "cpu")
        for tensor in (batch.seeds, batch.offsets):
            assert tensor.data_ptr() % 16 == 0, size
        assert batch.seeds.tolist() == [10 + i for i in range(size)]
        assert batch.offsets.tolist() == list(range(size))
