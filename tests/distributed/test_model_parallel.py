"""Model parallelism on the CPU over gloo: tensor parallelism (two worker processes split
every layer: heads, MLP features, vocabulary), pipeline parallelism (two stages of layers,
two steps in flight) and both (four processes) generate HF transformers' greedy tokens,
per architecture, with chunked prefill, preemption and prefix caching in play."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from transformers import LlamaConfig

from pagoda import LLM, SamplingParams
from tests.engine.tiny_models import (
    VOCAB,
    dense_family_configs,
    hf_greedy,
    make_checkpoint,
    tiny_configs,
)

NEW_TOKENS = 10
GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
ODD_VOCAB = 251  # not a multiple of 2: the last rank's vocabulary block is padded


def _configs() -> dict[str, object]:
    configs = dict(tiny_configs())
    llama = configs["llama"].to_dict()
    configs["mqa-odd-vocab"] = LlamaConfig(**{**llama, "num_key_value_heads": 1,
                                              "vocab_size": ODD_VOCAB})
    return configs | dense_family_configs()


def _prompts(seed: int, lengths: list[int], vocab: int,
             prefix: list[int] | None = None) -> list[list[int]]:
    rng = random.Random(seed)
    return [(prefix or []) + [rng.randrange(3, vocab) for _ in range(n)] for n in lengths]


def _generate(llm: LLM, prompts: list[list[int]]) -> list[list[int]]:
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outputs]


LAYOUTS = {"tp2": {"tensor_parallel_size": 2}, "pp2": {"pipeline_parallel_size": 2},
           "tp2-pp2": {"tensor_parallel_size": 2, "pipeline_parallel_size": 2}}
DENSE = list(dense_family_configs())
"""Checkpoints with random weights (soft caps matter); split two ways each: tensors (Phi-3's
fused projections cut per part then per rank, the soft-capped logits gathered) and stages
(Gemma's scaled embedding and sandwich norms)."""
CASES = [(layout, arch) for layout in LAYOUTS for arch in _configs() if arch not in DENSE]
CASES += [("tp2", "gemma3"), ("tp2", "phi3"), ("pp2", "gemma2")]


@pytest.mark.parametrize(("layout", "arch"), CASES, ids=[f"{lay}-{a}" for lay, a in CASES])
def test_parallel_ranks_generate_hf_greedy_tokens(layout: str, arch: str,
                                                  tmp_path: Path) -> None:
    config = _configs()[arch]
    vocab = min(config.vocab_size, VOCAB)
    mixed = _prompts(1, [3, 17, 9, 30, 1, 12], vocab)
    shared = _prompts(2, [5, 9, 2], vocab, prefix=_prompts(3, [21], vocab)[0])
    path = make_checkpoint(tmp_path, config, random_weights=arch in DENSE)
    expected = hf_greedy(path, mixed + shared, NEW_TOKENS)

    # 8 tokens a step: prefills chunk among decodes; 14 blocks of 4 cannot hold the batch.
    llm = LLM(str(path), dtype="float32", device="cpu", max_num_batched_tokens=8,
              num_kv_blocks=14, block_size=4, **LAYOUTS[layout])
    try:
        info = llm.engine.core.info
        assert (info["tensor_parallel_size"], info["pipeline_parallel_size"]) == (
            LAYOUTS[layout].get("tensor_parallel_size", 1),
            LAYOUTS[layout].get("pipeline_parallel_size", 1))
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
    with pytest.raises(ValueError, match=r"executor 'uniproc' runs one device; 2 devices "
                                         r"\(tensor_parallel_size x pipeline_parallel_size\) "
                                         r"need executor 'mp' or 'ray'"):
        LLM(str(path), device="cpu", tensor_parallel_size=2,
            distributed_executor_backend="uniproc")


def test_pipeline_stages_work_on_different_steps_at_once(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """With two stages a second step is launched before the first's tokens are read, and
    consecutive steps hold different requests (each a share of them)."""
    path = make_checkpoint(tmp_path, tiny_configs()["llama"])
    llm = LLM(str(path), dtype="float32", device="cpu", pipeline_parallel_size=2,
              num_kv_blocks=64, block_size=4)
    core = llm.engine.core
    scheduled: list[set[str]] = []
    in_flight_when_read: list[int] = []
    schedule, finish = core.scheduler.schedule, core._finish_oldest

    def recording_schedule():
        step = schedule()
        scheduled.append({item.request_id for item in step.scheduled})
        return step

    def recording_finish():
        in_flight_when_read.append(len(core._in_flight))
        return finish()

    monkeypatch.setattr(core.scheduler, "schedule", recording_schedule)
    monkeypatch.setattr(core, "_finish_oldest", recording_finish)
    try:
        prompts = _prompts(4, [6] * 8, VOCAB)
        assert _generate(llm, prompts) == _generate_alone(path, prompts)
        assert max(in_flight_when_read) == 2
        busy = [s for s in scheduled if s]
        assert max(len(s) for s in busy) <= 4  # a share: half of the 8 requests
        assert any(a and b and not a & b for a, b in zip(busy, busy[1:]))
    finally:
        llm.engine.shutdown()


def _generate_alone(path: Path, prompts: list[list[int]]) -> list[list[int]]:
    llm = LLM(str(path), dtype="float32", device="cpu", num_kv_blocks=64, block_size=4)
    return _generate(llm, prompts)
