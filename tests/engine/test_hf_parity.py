"""Greedy tokens identical to HF transformers, per architecture and scheduling regime."""

from __future__ import annotations

import random

import pytest

from pagoda import LLM, SamplingParams
from tests.engine.tiny_models import VOCAB, hf_greedy, make_checkpoint, tiny_configs

NEW_TOKENS = 12
ARCHS = list(tiny_configs())


def _prompts(seed: int, lengths: list[int], prefix: list[int] | None = None) -> list[list[int]]:
    rng = random.Random(seed)
    return [(prefix or []) + [rng.randrange(3, VOCAB) for _ in range(n)] for n in lengths]


MIXED = _prompts(1, [3, 17, 9, 30, 1, 12])
SHARED = _prompts(2, [5, 9, 2], prefix=_prompts(3, [21])[0])


@pytest.fixture(scope="module", params=ARCHS)
def checkpoint(request, tmp_path_factory):
    """(arch, model dir, HF greedy outputs for MIXED and SHARED)."""
    path = make_checkpoint(tmp_path_factory.mktemp(request.param), tiny_configs()[request.param])
    expected = hf_greedy(path, MIXED + SHARED, NEW_TOKENS)
    return request.param, path, expected[: len(MIXED)], expected[len(MIXED):]


GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)


def _generate(llm: LLM, prompts: list[list[int]]) -> list[list[int]]:
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outputs]


@pytest.mark.parametrize("device", ["cpu", "template"])
def test_batch_of_one(checkpoint, device):
    _, path, expected, _ = checkpoint
    llm = LLM(str(path), dtype="float32", device=device, num_kv_blocks=256)
    for prompt, want in zip(MIXED[:2], expected[:2]):
        assert _generate(llm, [prompt]) == [want]


@pytest.mark.parametrize("device", ["cpu", "template"])
def test_mixed_lengths_in_one_batch(checkpoint, device):
    _, path, expected, _ = checkpoint
    llm = LLM(str(path), dtype="float32", device=device, num_kv_blocks=256)
    assert _generate(llm, MIXED) == expected


def test_chunked_prefill_eight_tokens_per_step(checkpoint):
    _, path, expected, _ = checkpoint
    llm = LLM(str(path), dtype="float32", max_num_batched_tokens=8, num_kv_blocks=256, block_size=4)
    assert _generate(llm, MIXED) == expected


@pytest.mark.parametrize("device", ["cpu", "template"])
def test_prefix_caching_with_a_shared_prefix(checkpoint, device):
    _, path, _, expected = checkpoint
    llm = LLM(str(path), dtype="float32", device=device, num_kv_blocks=256, block_size=4)
    assert _generate(llm, SHARED[:1]) == expected[:1]
    assert _generate(llm, SHARED) == expected
    stats = llm.engine.core.stats()
    assert stats.prefix_cache_hits >= 3 * 20  # the 21-token prefix, block by block


@pytest.mark.parametrize("device", ["cpu", "template"])
def test_preemption_with_a_tiny_kv_cache(checkpoint, device):
    _, path, expected, _ = checkpoint
    llm = LLM(str(path), dtype="float32", device=device, num_kv_blocks=14, block_size=4)
    assert _generate(llm, MIXED) == expected
    stats = llm.engine.core.stats()
    assert stats.num_preemptions > 0
    assert stats.kv_cache_usage == 0.0  # every block back in the pool
