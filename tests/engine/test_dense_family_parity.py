"""Gemma 2, Gemma 3 and Phi-3 generate HF transformers' greedy tokens through the engine:
one prompt alone, a batch of mixed lengths (some longer than the sliding window), prefills
chunked eight tokens a step, and a shared prefix served from the prefix cache."""

from __future__ import annotations

import random

import pytest

from pagoda import LLM, SamplingParams
from tests.engine.tiny_models import (
    LONGROPE_CONTEXT,
    VOCAB,
    dense_family_configs,
    hf_greedy,
    make_checkpoint,
)

NEW_TOKENS = 12
GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)


def _prompts(seed: int, lengths: list[int], prefix: list[int] | None = None) -> list[list[int]]:
    rng = random.Random(seed)
    return [(prefix or []) + [rng.randrange(3, VOCAB) for _ in range(n)] for n in lengths]


MIXED = _prompts(1, [3, 17, 9, 30, 1, 12])
SHARED = _prompts(2, [5, 9, 2], prefix=_prompts(3, [21])[0])


@pytest.fixture(scope="module", params=list(dense_family_configs()))
def checkpoint(request, tmp_path_factory):
    """(arch, model dir, HF greedy outputs for MIXED and SHARED)."""
    config = dense_family_configs()[request.param]
    path = make_checkpoint(tmp_path_factory.mktemp(request.param), config, random_weights=True)
    expected = hf_greedy(path, MIXED + SHARED, NEW_TOKENS)
    return request.param, path, expected[: len(MIXED)], expected[len(MIXED):]


def _generate(llm: LLM, prompts: list[list[int]]) -> list[list[int]]:
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outputs]


def test_one_prompt_then_a_mixed_batch(checkpoint):
    arch, path, expected, _ = checkpoint
    llm = LLM(str(path), dtype="float32", device="cpu", num_kv_blocks=256)
    if arch == "phi3":  # served within its LongRoPE original context
        assert llm.engine.max_model_len == LONGROPE_CONTEXT
    assert _generate(llm, [MIXED[3]]) == [expected[3]]
    assert _generate(llm, MIXED) == expected


def test_chunked_prefill_and_prefix_caching(checkpoint):
    _, path, expected, shared = checkpoint
    llm = LLM(str(path), dtype="float32", device="cpu", max_num_batched_tokens=8,
              num_kv_blocks=256, block_size=4)
    assert _generate(llm, MIXED) == expected
    assert _generate(llm, SHARED[:1]) == shared[:1]
    hits = llm.engine.core.stats().prefix_cache_hits
    assert _generate(llm, SHARED) == shared
    assert llm.engine.core.stats().prefix_cache_hits - hits >= 3 * 20  # the 21-token prefix
