import pytest
import torch

from pagoda.sample import Sampler, SamplingBatch
from pagoda.sample.processors import apply_logits_processors

NEG_INF = float("-inf")


def processed(logits: torch.Tensor, states) -> torch.Tensor:
    out = logits.clone()
    apply_logits_processors(out, SamplingBatch.from_states(states, logits.shape[-1], "cpu"))
    return out


def test_penalties_match_hand_computation(state):
    logits = torch.tensor([[2.0, -1.0, 0.5, -0.5, 1.0]] * 2)
    penalised = state(prompt=[0, 3], output=[2, 2, 4], repetition_penalty=2.0,
                      frequency_penalty=0.5, presence_penalty=0.3)
    plain = state(prompt=[0, 3], output=[2, 2, 4])
    out = processed(logits, [penalised, plain])
    # seen (prompt or output): 0, 2, 3, 4 -> rep: [1.0, -1.0, 0.25, -1.0, 0.5];
    # output counts {2: 2, 4: 1} -> -0.5 * count - 0.3 * present.
    expected = torch.tensor([1.0, -1.0, 0.25 - 1.0 - 0.3, -1.0, 0.5 - 0.5 - 0.3])
    torch.testing.assert_close(out[0], expected)
    torch.testing.assert_close(out[1], logits[1])


def test_frequency_and_presence_ignore_prompt_tokens(state):
    logits = torch.zeros(1, 4)
    out = processed(logits, [state(prompt=[1, 1, 1], output=[2], frequency_penalty=1.0,
                                   presence_penalty=1.0)])
    torch.testing.assert_close(out[0], torch.tensor([0.0, 0.0, -2.0, 0.0]))


def test_logit_bias_adds_and_steers_greedy(state):
    logits = torch.tensor([[1.0, 2.0, 0.0, 0.5]])
    states = [state(temperature=0.0, logit_bias={2: 5.0, 1: -1.5})]
    torch.testing.assert_close(processed(logits, states)[0], torch.tensor([1.0, 0.5, 5.0, 0.5]))
    assert Sampler(seed=0)(logits, states).sampled_token_ids.tolist() == [2]


def test_allowed_token_ids_mask_other_tokens(state):
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    states = [state(allowed_token_ids=[1, 4]), state(temperature=0.0, allowed_token_ids=[7]),
              state()]
    out = processed(logits, states)
    assert torch.isfinite(out[0]).nonzero().flatten().tolist() == [1, 4]
    assert torch.isfinite(out[1]).nonzero().flatten().tolist() == [7]
    torch.testing.assert_close(out[2], logits[2])
    sampler = Sampler(seed=0)
    for _ in range(50):
        tokens = sampler(logits, states).sampled_token_ids.tolist()
        assert tokens[0] in (1, 4) and tokens[1] == 7


def test_single_token_bad_word_is_always_banned(state):
    s = state(temperature=0.0)
    s.params.bad_words_token_ids = [[3]]
    logits = torch.tensor([[0.0, 1.0, 2.0, 9.0]])
    assert processed(logits, [s])[0, 3] == NEG_INF
    assert Sampler()(logits, [s]).sampled_token_ids.tolist() == [2]


def test_multi_token_bad_word_bans_last_token_after_prefix(state):
    s = state(temperature=0.0, output=[0, 5, 6])
    s.params.bad_words_token_ids = [[5, 6, 7], [6, 8], [2, 9]]
    out = processed(torch.zeros(1, 10), [s])
    assert torch.isinf(out[0]).nonzero().flatten().tolist() == [7, 8]
    s.output_token_ids.append(7)
    assert torch.isfinite(processed(torch.zeros(1, 10), [s])).all()


@pytest.mark.parametrize("ignore_eos", [False, True])
def test_min_tokens_masks_stop_and_eos_until_reached(state, ignore_eos):
    s = state(eos=3, min_tokens=2, stop_token_ids=[4], ignore_eos=ignore_eos, temperature=0.0)
    logits = torch.tensor([[0.0, 0.0, 0.0, 9.0, 8.0]])
    masked = [4] if ignore_eos else [3, 4]
    for output_len in (0, 1):
        s.output_token_ids = [0] * output_len
        out = processed(logits, [s])
        assert torch.isinf(out[0]).nonzero().flatten().tolist() == masked
    s.output_token_ids = [0, 0]
    torch.testing.assert_close(processed(logits, [s]), logits)
    assert Sampler()(logits, [s]).sampled_token_ids.tolist() == [3]


def test_sampler_leaves_input_logits_untouched(state):
    logits = torch.randn(2, 8, generator=torch.Generator().manual_seed(1))
    before = logits.clone()
    Sampler(seed=0)(logits, [state(output=[1], repetition_penalty=1.5, logit_bias={0: 3}),
                             state(temperature=0.0, allowed_token_ids=[2])])
    torch.testing.assert_close(logits, before)
