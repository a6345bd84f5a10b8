"""Mixture-of-experts models generate HF transformers' greedy tokens (float32) alone and in
mixed batches, with chunked prefill, prefix caching and preemption in play."""

from __future__ import annotations

import random

import pytest

from pagoda import LLM, SamplingParams
from tests.engine.tiny_models import VOCAB, hf_greedy
from tests.engine.tiny_moe_models import make_moe_checkpoint, tiny_moe_configs

NEW_TOKENS = 10
GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)


def _prompts(seed: int, lengths: list[int], prefix: list[int] | None = None) -> list[list[int]]:
    rng = random.Random(seed)
    return [(prefix or []) + [rng.randrange(3, VOCAB) for _ in range(n)] for n in lengths]


MIXED = _prompts(1, [3, 17, 9, 30, 1, 12])
SHARED = _prompts(2, [5, 9, 2], prefix=_prompts(3, [21])[0])


@pytest.fixture(scope="module", params=list(tiny_moe_configs()))
def checkpoint(request, tmp_path_factory):
    """(model dir, HF greedy outputs for MIXED, for SHARED)."""
    path = make_moe_checkpoint(tmp_path_factory.mktemp(request.param),
                               tiny_moe_configs()[request.param])
    expected = hf_greedy(path, MIXED + SHARED, NEW_TOKENS)
    return path, expected[: len(MIXED)], expected[len(MIXED):]


def _generate(llm: LLM, prompts: list[list[int]]) -> list[list[int]]:
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outputs]


@pytest.mark.parametrize("device", ["cpu", "template"])
def test_alone_then_in_a_mixed_batch(checkpoint, device):
    path, expected, _ = checkpoint
    llm = LLM(str(path), dtype="float32", device=device, num_kv_blocks=256)
    assert _generate(llm, MIXED[:1]) == expected[:1]
    assert _generate(llm, MIXED) == expected


def test_chunked_prefill_with_preemption(checkpoint):
    """8 tokens a step: prompts chunk among decodes; 14 blocks of 4 cannot hold them all."""
    path, expected, _ = checkpoint
    llm = LLM(str(path), dtype="float32", device="cpu", max_num_batched_tokens=8,
              num_kv_blocks=14, block_size=4)
    assert _generate(llm, MIXED) == expected
    stats = llm.engine.core.stats()
    assert stats.num_preemptions > 0 and stats.kv_cache_usage == 0.0


def test_prefix_caching_with_a_shared_prefix(checkpoint):
    path, _, expected = checkpoint
    llm = LLM(str(path), dtype="float32", device="cpu", num_kv_blocks=256, block_size=4)
    assert _generate(llm, SHARED[:1]) == expected[:1]
    assert _generate(llm, SHARED) == expected
    assert llm.engine.core.stats().prefix_cache_hits >= 3 * 20  # the 21-token prefix
