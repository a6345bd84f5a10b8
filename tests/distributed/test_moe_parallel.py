"""Mixture-of-experts models on two CPU worker processes over gloo: tensor parallelism (each
rank a slice of every expert) and expert parallelism (each rank half the experts, whole)
generate HF transformers' greedy tokens, as one process does, with chunked prefill,
preemption and prefix caching in play."""

from __future__ import annotations

from pathlib import Path

import pytest

from pagoda import LLM
from tests.distributed.test_model_parallel import _generate, _prompts
from tests.engine.tiny_models import VOCAB, hf_greedy
from tests.engine.tiny_moe_models import make_moe_checkpoint, tiny_moe_configs

LAYOUTS = {"tp2": {"tensor_parallel_size": 2},
           "ep2": {"tensor_parallel_size": 2, "enable_expert_parallel": True}}
CASES = [("tp2", "mixtral"), ("tp2", "qwen2_moe"), ("ep2", "qwen2_moe"), ("ep2", "qwen3_moe")]


@pytest.mark.parametrize(("layout", "arch"), CASES, ids=[f"{lay}-{a}" for lay, a in CASES])
def test_split_experts_generate_hf_greedy_tokens(layout: str, arch: str,
                                                  tmp_path: Path) -> None:
    mixed = _prompts(1, [3, 17, 9, 30, 1, 12], VOCAB)
    shared = _prompts(2, [5, 9, 2], VOCAB, prefix=_prompts(3, [21], VOCAB)[0])
    path = make_moe_checkpoint(tmp_path, tiny_moe_configs()[arch])
    expected = hf_greedy(path, mixed + shared, 10)

    llm = LLM(str(path), dtype="float32", device="cpu", max_num_batched_tokens=8,
              num_kv_blocks=14, block_size=4, **LAYOUTS[layout])
    try:
        info = llm.engine.core.info
        assert (info["tensor_parallel_size"], info["expert_parallel"]) == (2, layout == "ep2")
        assert _generate(llm, mixed) == expected[: len(mixed)]
        assert llm.engine.core.stats().num_preemptions > 0
        hits = llm.engine.core.stats().prefix_cache_hits
        assert _generate(llm, shared) == expected[len(mixed):]
        assert llm.engine.core.stats().prefix_cache_hits - hits >= 2 * 20  # the shared prefix
    finally:
        llm.engine.shutdown()

