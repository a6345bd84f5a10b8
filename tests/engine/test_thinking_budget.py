"""A thinking budget on a tiny random model: once the budget is spent, the end of the
thinking is forced and generation goes on from it exactly as HF transformers would from
the same tokens."""

from __future__ import annotations

import random

import pytest

from pagoda import LLM, SamplingParams
from tests.engine.tiny_models import hf_greedy, make_checkpoint, tiny_configs

END = "w7 w9"
END_IDS = [7, 9]
rng = random.Random(5)
PROMPTS = [[rng.randrange(3, 200) for _ in range(n)] for n in (4, 9, 6)]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("llama"), tiny_configs()["llama"])


def _llm(path, **options) -> LLM:
    options = {"num_kv_blocks": 128, "block_size": 4} | options
    return LLM(str(path), dtype="float32", device="cpu", **options)


def _ended_at(tokens: list[int]) -> int | None:
    """Where END first occurs in `tokens`."""
    return next((i for i in range(len(tokens) - 1) if tokens[i:i + 2] == END_IDS), None)


@pytest.mark.parametrize("options", [{"async_scheduling": True}, {"async_scheduling": False},
                                     {"max_num_batched_tokens": 4}])
def test_greedy_thinking_ends_at_the_budget_and_goes_on_as_hf(checkpoint, options):
    budget, max_tokens = 3, 9
    llm = _llm(checkpoint, **options)
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True,
                            thinking_budget=budget, thinking_end=END)
    plain = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    outputs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS for _ in (0, 1)],
                           [params, plain] * len(PROMPTS), use_tqdm=False)
    free = hf_greedy(checkpoint, PROMPTS, max_tokens)
    forced_cases = 0
    for i, prompt in enumerate(PROMPTS):
        budgeted = outputs[2 * i].outputs[0].token_ids
        assert outputs[2 * i + 1].outputs[0].token_ids == free[i]  # its neighbour: untouched
        natural = _ended_at(free[i][:budget + 1])
        if natural is not None:  # the model ended its thinking itself: nothing forced
            assert budgeted == free[i]
            continue
        assert budgeted[:budget] == free[i][:budget]
        assert budgeted[budget:budget + 2] == END_IDS
        forced = prompt + budgeted[:budget + 2]
        (rest,) = hf_greedy(checkpoint, [forced], max_tokens - budget - 2)
        assert budgeted[budget + 2:] == rest
        forced_cases += 1
    assert forced_cases  # the prompts exercise the forcing


def test_sampled_thinking_never_runs_past_its_budget(checkpoint):
    llm = _llm(checkpoint)
    for budget in (0, 2, 5):
        params = SamplingParams(temperature=1.0, seed=budget, max_tokens=12, ignore_eos=True,
                                thinking_budget=budget, thinking_end=END, n=4)
        for output in llm.generate([{"prompt_token_ids": p} for p in PROMPTS], params,
                                   use_tqdm=False):
            for completion in output.outputs:
                end = _ended_at(completion.token_ids)
                assert end is not None and end <= budget, (budget, completion.token_ids)


@pytest.mark.parametrize(("fields", "message"), [
    ({"thinking_budget": -1}, "thinking_budget must be an integer >= 0"),
    ({"thinking_budget": 2, "thinking_end": ""}, "thinking_end must be a non-empty string"),
])
def test_params_validation_names_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**fields)
