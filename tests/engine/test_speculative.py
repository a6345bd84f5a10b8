"""Speculative decoding (n-gram prompt lookup) end to end on tiny random models: greedy
tokens are HF's with it, as without it, across batch sizes, chunked prefill, preemption,
prefix caching and pipeline stages; stops and lengths land where they do without it;
seeded sampling is reproducible; and sampled tokens are distributed as HF's model says
(a chi-square test on a four-token vocabulary)."""

from __future__ import annotations

import itertools

import pytest
import torch
from scipy.stats import chisquare
from transformers import AutoModelForCausalLM

from pagoda import LLM, SamplingParams
from tests.engine.tiny_models import hf_greedy, make_checkpoint, tiny_configs
from tests.models.tiny_pooling import make_decoder_embedder

NEW_TOKENS = 24
PROMPTS = [[5, 9, 14, 200, 31, 7, 77] * 3, [42, 8, 250, 3, 42, 8, 250], [7, 7, 7, 7, 9],
           [100, 101, 102, 100, 101, 17, 18, 19, 20, 21, 22]]
"""Prompts with repeated spans; the tiny random model's greedy outputs fall into loops, so
drafts from the prompt and from the output get accepted."""
GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
SPECULATIVE = {"speculative_method": "ngram", "num_speculative_tokens": 3,
               "prompt_lookup_max": 3}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("llama"), tiny_configs()["llama"])


@pytest.fixture(scope="module")
def hf_tokens(model_dir):
    return hf_greedy(model_dir, PROMPTS, NEW_TOKENS)


def _llm(model_dir, **options) -> LLM:
    options = {"num_kv_blocks": 128, **options}
    return LLM(str(model_dir), dtype="float32", device="cpu", block_size=4, **options)


def _generate(llm: LLM, params: SamplingParams | list[SamplingParams], prompts=PROMPTS):
    return llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)


def _accepted(outputs) -> int:
    """Accepted drafts over the outputs; checks that each request's count is its share of
    the engine's (the caller compares the totals)."""
    return sum(int(o.metrics.get("spec_accepted_tokens", 0)) for o in outputs)


@pytest.mark.parametrize("options", [
    {}, {"max_num_seqs": 1}, {"max_num_batched_tokens": 8}, {"num_kv_blocks": 12},
], ids=["batch", "one-at-a-time", "chunked-prefill", "preemption"])
def test_greedy_tokens_are_hf_greedy_with_drafts_accepted(model_dir, hf_tokens, options):
    llm = _llm(model_dir, **SPECULATIVE, **options)
    for _ in range(2):  # the second time with the prompts in the prefix cache
        outputs = _generate(llm, GREEDY)
        assert [o.outputs[0].token_ids for o in outputs] == hf_tokens
    stats = llm.engine.core.stats()
    drafted = sum(int(o.metrics.get("spec_draft_tokens", 0)) for o in outputs)
    assert 0 < _accepted(outputs) <= drafted
    assert stats.spec_accepted_tokens == 2 * _accepted(outputs)
    assert stats.spec_draft_tokens == 2 * drafted
    if "num_kv_blocks" in options:
        assert stats.num_preemptions > 0


def test_overlapped_steps_mix_with_speculative_ones(model_dir, hf_tokens):
    """With async scheduling, requests that do not speculate (here: logprobs) overlap
    their steps while speculative ones wait for their tokens; all are HF's tokens."""
    llm = _llm(model_dir, **SPECULATIVE, async_scheduling=True)
    plain = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True, logprobs=1)
    outputs = _generate(llm, [GREEDY, plain, GREEDY, plain])
    assert [o.outputs[0].token_ids for o in outputs] == hf_tokens
    assert "spec_draft_tokens" not in outputs[1].metrics
    assert _accepted(outputs) > 0


def test_a_model_that_pools_refuses_speculation(tmp_path):
    path = make_decoder_embedder(tmp_path)  # runner auto: it pools
    with pytest.raises(ValueError, match="speculative_method: the model pools"):
        _llm(path, **SPECULATIVE)


def test_pipeline_stages_generate_hf_greedy_tokens(model_dir, hf_tokens):
    llm = _llm(model_dir, **SPECULATIVE, pipeline_parallel_size=2)
    outputs = _generate(llm, GREEDY)
    assert [o.outputs[0].token_ids for o in outputs] == hf_tokens
    assert _accepted(outputs) > 0


def test_busy_steps_do_not_speculate(model_dir, hf_tokens):
    """speculative_disable_by_batch_size 1: while several requests run, none proposes
    drafts; the longest, left alone, does; every output is HF's greedy tokens."""
    lengths = [NEW_TOKENS, 10, 10, 10]  # without the limit, each drafts
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in lengths]
    llm = _llm(model_dir, **SPECULATIVE, speculative_disable_by_batch_size=1)
    outputs = _generate(llm, params)
    assert [o.outputs[0].token_ids for o in outputs] == [
        tokens[:n] for tokens, n in zip(hf_tokens, lengths)]
    drafted = [int(o.metrics.get("spec_draft_tokens", 0)) for o in outputs]
    assert drafted[0] > 0 and drafted[1:] == [0, 0, 0]
    assert _accepted(outputs) > 0


def test_stops_and_lengths_land_as_without_speculation(model_dir, hf_tokens):
    """Stop tokens (held back by min_tokens until the outputs loop, where drafts are
    accepted), eos and max_tokens end each request where they end it without drafts."""
    params, prompts = [], []
    for prompt, tokens in zip(PROMPTS, hf_tokens):
        for i in range(2, NEW_TOKENS, 5):
            params.append(SamplingParams(temperature=0.0, max_tokens=i, ignore_eos=True))
            params.append(SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS,
                                         stop_token_ids=[tokens[i]], min_tokens=i))
            prompts += [prompt, prompt]
    plain = _generate(_llm(model_dir), params, prompts)
    speculative = _generate(_llm(model_dir, **SPECULATIVE), params, prompts)
    got = [(o.outputs[0].token_ids, o.outputs[0].finish_reason, o.outputs[0].stop_reason)
           for o in speculative]
    assert got == [(o.outputs[0].token_ids, o.outputs[0].finish_reason,
                    o.outputs[0].stop_reason) for o in plain]
    assert {reason for _, reason, _ in got} == {"stop", "length"}
    assert _accepted(speculative) > 0


ALLOWED = [3, 4, 5, 6]
"""The vocabulary of the statistical test (allowed_token_ids)."""
STAT_PROMPT = [3, 4, 5, 6, 3, 4, 5, 6, 3, 4]
STAT_TOKENS = 3
STAT_SAMPLES = 600


def test_stop_strings_end_outputs_as_without_speculation(model_dir, hf_tokens):
    """A stop string completed by a token inside an accepted run ends the output there:
    the tokens after it in the same step are not output."""
    params, prompts = [], []
    for prompt, tokens in zip(PROMPTS, hf_tokens):
        for i in range(5, 10):  # where outputs start to loop, so drafts get accepted
            if min(tokens[i : i + 3]) >= 3:  # words (special tokens have no text)
                stop = " ".join(f"w{t}" for t in tokens[i : i + 3])
                params.append(SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS,
                                             ignore_eos=True, stop=[stop]))
                prompts.append(prompt)
    plain = _generate(_llm(model_dir), params, prompts)
    speculative = _generate(_llm(model_dir, **SPECULATIVE), params, prompts)
    assert [(o.outputs[0].token_ids, o.outputs[0].text, o.outputs[0].stop_reason)
            for o in speculative] == [(o.outputs[0].token_ids, o.outputs[0].text,
                                       o.outputs[0].stop_reason) for o in plain]
    assert {o.outputs[0].finish_reason for o in speculative} == {"stop"}
    assert _accepted(speculative) > 0


def test_seeded_sampling_is_reproducible(model_dir):
    """A seeded request's draws at a position (its plain draw, the acceptance draw and the
    redraw) depend on its seed and the position only: the same tokens alone or in a batch,
    and in another engine that batches differently."""
    params = [SamplingParams(temperature=1.0, seed=seed, max_tokens=NEW_TOKENS,
                             ignore_eos=True, allowed_token_ids=ALLOWED) for seed in range(8)]
    prompts = [STAT_PROMPT] * len(params)
    llm = _llm(model_dir, **SPECULATIVE)
    batch = _generate(llm, params, prompts)
    (alone,) = _generate(llm, params[:1], prompts[:1])
    again = _generate(_llm(model_dir, **SPECULATIVE, max_num_seqs=3), params, prompts)
    assert alone.outputs[0].token_ids == batch[0].outputs[0].token_ids
    assert [o.outputs[0].token_ids for o in again] == [o.outputs[0].token_ids for o in batch]
    assert len({tuple(o.outputs[0].token_ids) for o in batch}) > 1  # the seeds matter
    assert _accepted(batch) > 0


def _exact_distribution(path) -> dict[tuple[int, ...], float]:
    """HF's probability of each sequence of STAT_TOKENS allowed tokens after STAT_PROMPT,
    sampling at temperature 1 from the logits restricted to ALLOWED."""
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    probs: dict[tuple[int, ...], float] = {(): 1.0}
    with torch.inference_mode():
        for _ in range(STAT_TOKENS):
            prefixes = list(probs)
            logits = model(torch.tensor([STAT_PROMPT + list(p) for p in prefixes])).logits
            step = logits[:, -1, ALLOWED].softmax(-1).tolist()
            probs = {(*p, t): probs[p] * q for p, row in zip(prefixes, step)
                     for t, q in zip(ALLOWED, row)}
    return probs


@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_sampled_tokens_are_distributed_as_the_model_says(tmp_path, method):
    """The first STAT_TOKENS tokens of STAT_SAMPLES unseeded requests, with drafts
    verified, against HF's exact distribution: a chi-square test at the 0.1% level (cells
    expected below 5 are merged). The drafts: prompt lookup's, or a draft model's (a
    Qwen2 of other random weights: its q differs from p). Wrong rules fail it by far
    (checked once, by hand): accepting every draft (p ~ 0), on a rejection keeping the
    draw of the next position instead of the rejecting one (p ~ 1e-25), and for the draft
    model accepting with probability p(t) instead of min(1, p(t) / q(t))."""
    path = make_checkpoint(tmp_path / "target", tiny_configs()["llama"], random_weights=True)
    exact = _exact_distribution(path)
    speculative = SPECULATIVE if method == "ngram" else {
        "speculative_method": "draft", "num_speculative_tokens": 2,
        "speculative_model": str(make_checkpoint(tmp_path / "draft", tiny_configs()["qwen2"],
                                                 seed=1, random_weights=True))}
    llm = _llm(path, **speculative, max_num_seqs=512, max_num_batched_tokens=4096,
               num_kv_blocks=2048)
    params = SamplingParams(temperature=1.0, max_tokens=STAT_TOKENS, ignore_eos=True,
                            allowed_token_ids=ALLOWED)
    outputs = _generate(llm, params, [STAT_PROMPT] * STAT_SAMPLES)
    seen: dict[tuple[int, ...], int] = dict.fromkeys(exact, 0)
    for o in outputs:
        seen[tuple(o.outputs[0].token_ids)] += 1
    cells = sorted(exact, key=exact.get, reverse=True)
    big = list(itertools.takewhile(lambda c: exact[c] * STAT_SAMPLES >= 5, cells))
    small = cells[len(big):]
    observed = [seen[c] for c in big] + [sum(seen[c] for c in small)]
    expected = [exact[c] * STAT_SAMPLES for c in big] + [
        sum(exact[c] for c in small) * STAT_SAMPLES]
    expected[-1] += STAT_SAMPLES - sum(expected)  # float rounding, so the totals agree
    assert chisquare(observed, expected).pvalue > 1e-3
    stats = llm.engine.core.stats()
    assert 0 < stats.spec_accepted_tokens < stats.spec_draft_tokens  # both outcomes happen
