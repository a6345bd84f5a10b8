"""Logprobs against HF's log-softmax, seeded sampling, n > 1, stop handling, LLM errors."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from pagoda import LLM, SamplingParams
from tests.engine.tiny_models import make_checkpoint, tiny_configs

PROMPTS = [[5, 9, 14, 200, 31, 7, 77], [42, 8, 250, 3]]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("llama"), tiny_configs()["llama"])


@pytest.fixture(scope="module")
def llm(model_dir):
    return LLM(str(model_dir), dtype="float32", num_kv_blocks=128, block_size=4, max_num_batched_tokens=64)


@pytest.fixture(scope="module")
def hf_model(model_dir):
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


def _hf_logprobs(hf_model, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return hf_model(torch.tensor([ids])).logits[0].float().log_softmax(-1)


def test_prompt_and_sampled_logprobs_match_hf(llm, hf_model):
    params = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True, logprobs=3,
                            prompt_logprobs=2)
    (out,) = llm.generate([{"prompt_token_ids": PROMPTS[0]}], params, use_tqdm=False)
    completion = out.outputs[0]
    ids = PROMPTS[0] + completion.token_ids
    ref = _hf_logprobs(hf_model, ids)

    assert out.prompt_logprobs[0] is None and len(out.prompt_logprobs) == len(PROMPTS[0])
    for pos, entry in enumerate(out.prompt_logprobs[1:], start=1):
        token = PROMPTS[0][pos]
        assert entry.token_ids[0] == token
        assert entry.logprobs[0] == pytest.approx(ref[pos - 1, token].item(), abs=1e-4)
        top = ref[pos - 1].topk(2)
        assert entry.token_ids[1:] == top.indices.tolist()
        assert entry.rank == int((ref[pos - 1] > ref[pos - 1, token]).sum()) + 1

    assert len(completion.logprobs) == 5
    total = 0.0
    for i, entry in enumerate(completion.logprobs):
        row = ref[len(PROMPTS[0]) - 1 + i]
        token = completion.token_ids[i]
        assert entry.token_ids[0] == token and entry.rank == 1  # greedy picks the top token
        assert entry.logprobs[0] == pytest.approx(row[token].item(), abs=1e-4)
        assert entry.token_ids[1:] == row.topk(3).indices.tolist()
        total += entry.logprobs[0]
    assert completion.cumulative_logprob == pytest.approx(total)


def test_seeded_sampling_same_alone_and_in_a_batch(llm):
    seeded = SamplingParams(temperature=1.0, top_p=0.9, seed=1234, max_tokens=10, ignore_eos=True)
    other = SamplingParams(temperature=0.8, max_tokens=7, ignore_eos=True)
    greedy = SamplingParams(temperature=0.0, max_tokens=9, ignore_eos=True)
    (alone,) = llm.generate([PROMPTS[0]], seeded, use_tqdm=False)
    batch = llm.generate([PROMPTS[1], PROMPTS[0], PROMPTS[1]], [other, seeded, greedy],
                         use_tqdm=False)
    assert batch[1].outputs[0].token_ids == alone.outputs[0].token_ids
    different = SamplingParams(temperature=1.0, top_p=0.9, seed=4321, max_tokens=10,
                               ignore_eos=True)
    (other_seed,) = llm.generate([PROMPTS[0]], different, use_tqdm=False)
    assert other_seed.outputs[0].token_ids != alone.outputs[0].token_ids


def test_n_gives_n_distinct_completions_sharing_the_prompt(llm):
    params = SamplingParams(n=4, temperature=1.0, seed=7, max_tokens=6, ignore_eos=True)
    (out,) = llm.generate([PROMPTS[0] * 3], params, use_tqdm=False)
    assert [c.index for c in out.outputs] == [0, 1, 2, 3]
    assert all(len(c.token_ids) == 6 and c.finish_reason == "length" for c in out.outputs)
    assert len({tuple(c.token_ids) for c in out.outputs}) > 1
    assert llm.engine.core.stats().kv_cache_usage == 0.0


def test_outputs_in_input_order_and_max_tokens(llm):
    prompts = [PROMPTS[i % 2] for i in range(5)]
    params = [SamplingParams(temperature=0.0, max_tokens=m, ignore_eos=True)
              for m in (5, 1, 4, 2, 3)]
    outputs = llm.generate(prompts, params, use_tqdm=False)
    assert [len(o.outputs[0].token_ids) for o in outputs] == [5, 1, 4, 2, 3]
    assert [o.prompt_token_ids for o in outputs] == prompts


def test_stop_token_ids_and_text_stop_strings(llm):
    (ref,) = llm.generate([PROMPTS[0]], SamplingParams(temperature=0.0, max_tokens=8,
                                                       ignore_eos=True), use_tqdm=False)
    tokens = ref.outputs[0].token_ids
    stop_token = tokens[3]
    first = tokens.index(stop_token)
    (out,) = llm.generate([PROMPTS[0]], SamplingParams(
        temperature=0.0, max_tokens=8, ignore_eos=True, stop_token_ids=[stop_token]),
        use_tqdm=False)
    assert out.outputs[0].token_ids == tokens[: first + 1]
    assert out.outputs[0].stop_reason == stop_token and out.outputs[0].finish_reason == "stop"
    # A stop string: the word-level tokenizer writes token i as "w{i}".
    word = f"w{tokens[2]}"
    (out,) = llm.generate([PROMPTS[0]], SamplingParams(
        temperature=0.0, max_tokens=8, ignore_eos=True, stop=[word]), use_tqdm=False)
    text = out.outputs[0].text
    assert word not in text and out.outputs[0].stop_reason == word
    assert ref.outputs[0].text.startswith(text)
    assert llm.engine.core.stats().num_running == 0


def test_prompt_too_long_is_a_clear_value_error(llm):
    with pytest.raises(ValueError, match="max_model_len"):
        llm.generate([[5] * 600], SamplingParams(max_tokens=1), use_tqdm=False)
    with pytest.raises(ValueError, match="max_tokens"):
        llm.generate([[5] * 500], SamplingParams(max_tokens=100), use_tqdm=False)
    with pytest.raises(ValueError, match="out of range"):
        llm.generate([[5, 999]], SamplingParams(max_tokens=1), use_tqdm=False)
    with pytest.raises(ValueError, match="empty"):
        llm.generate([[]], SamplingParams(max_tokens=1), use_tqdm=False)
    assert not llm.engine.has_unfinished_requests()


def test_text_prompts_are_tokenized_and_detokenized(llm):
    (out,) = llm.generate(["w5 w9 w14"], SamplingParams(temperature=0.0, max_tokens=4,
                                                       ignore_eos=True), use_tqdm=False)
    assert out.prompt_token_ids == [5, 9, 14]
    tokenizer = llm.get_tokenizer()
    assert out.outputs[0].text.strip() == tokenizer.decode(out.outputs[0].token_ids,
                                                           skip_special_tokens=True)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "auto"])
def test_other_dtypes_run_and_stay_close_to_float32(model_dir, llm, dtype):
    other = LLM(str(model_dir), dtype=dtype, num_kv_blocks=64, block_size=4)
    # "auto" keeps the checkpoint's own dtype (saved in float32) where the platform runs it.
    expected = dtype if dtype != "auto" else "float32"
    assert other.engine.core.info["dtype"] == expected
    params = SamplingParams(temperature=0.0, max_tokens=1, logprobs=5, ignore_eos=True)
    (ours,) = other.generate([PROMPTS[0]], params, use_tqdm=False)
    (ref,) = llm.generate([PROMPTS[0]], params, use_tqdm=False)
    # The float32 top-5 holds the low-precision greedy token, with a close logprob.
    ref_top = dict(zip(ref.outputs[0].logprobs[0].token_ids[1:],
                       ref.outputs[0].logprobs[0].logprobs[1:]))
    token, logprob = ours.outputs[0].token_ids[0], ours.outputs[0].logprobs[0].logprobs[0]
    assert token in ref_top
    assert logprob == pytest.approx(ref_top[token], abs=0.1)
