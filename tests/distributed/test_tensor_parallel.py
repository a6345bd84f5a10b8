"""Tensor parallelism on the CPU over gloo: two worker processes split every layer (heads,
MLP features, vocabulary) and generate HF transformers' greedy tokens, per architecture,
with chunked prefill, preemption and prefix caching in play."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from transformers import LlamaConfig

from pagoda import LLM, SamplingParams
from tests.engine.tiny_models import VOCAB, hf_greedy, make_checkpoint, tiny_configs

NEW_TOKENS = 10
GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
ODD_VOCAB = 251  # not a multiple of 2: the last rank's vocabulary block is padded


def _configs() -> dict[str, object]:
    configs = dict(tiny_configs())
    llama = configs["llama"].to_dict()
    configs["mqa-odd-vocab"] = LlamaConfig(**{**llama, "num_key_value_heads": 1,
                                              "vocab_size": ODD_VOCAB})
    return configs


def _prompts(seed: int, lengths: list[int], vocab: int,
             prefix: list[int] | None = None) -> list[list[int]]:
    rng = random.Random(seed)
    return [(prefix or []) + [rng.randrange(3, vocab) for _ in range(n)] for n in lengths]


def _generate(llm: LLM, prompts: list[list[int]]) -> list[list[int]]:
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outputs]


@pytest.mark.parametrize("arch", list(_configs()))
def test_two_ranks_generate_hf_greedy_tokens(arch: str, tmp_path: Path) -> None:
    config = _configs()[arch]
    vocab = min(config.vocab_size, VOCAB)
    mixed = _prompts(1, [3, 17, 9, 30, 1, 12], vocab)
    shared = _prompts(2, [5, 9, 2], vocab, prefix=_prompts(3, [21], vocab)[0])
    path = make_checkpoint(tmp_path, config)
    expected = hf_greedy(path, mixed + shared, NEW_TOKENS)

    # 8 tokens a step: prefills chunk among decodes; 14 blocks of 4 cannot hold the batch.
    llm = LLM(str(path), dtype="float32", device="cpu", tensor_parallel_size=2,
              max_num_batched_tokens=8, num_kv_blocks=14, block_size=4)
    try:
        assert llm.engine.core.info["tensor_parallel_size"] == 2
        assert _generate(llm, mixed) == expected[: len(mixed)]
        assert llm.engine.core.stats().num_preemptions > 0
        assert _generate(llm, shared[:1]) == expected[len(mixed) : len(mixed) + 1]
        hits = llm.engine.core.stats().prefix_cache_hits
        assert _generate(llm, shared) == expected[len(mixed):]
        assert llm.engine.core.stats().prefix_cache_hits - hits >= 3 * 20  # the shared prefix
        assert llm.engine.core.stats().kv_cache_usage == 0.0
    finally:
        llm.engine.shutdown()


def test_tensor_parallel_needs_a_multiprocess_executor(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path, tiny_configs()["llama"])
    with pytest.raises(ValueError, match="executor 'uniproc' runs one device; "
                                         "tensor_parallel_size 2 needs executor 'mp'"):
        LLM(str(path), device="cpu", tensor_parallel_size=2, executor="uniproc")
