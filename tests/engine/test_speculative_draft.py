"""Speculative decoding with a draft model end to end on tiny random models: greedy tokens
are HF's with it (the target as its own draft, and a Qwen2 draft for a Llama target),
across batch sizes, chunked prefill, preemption and prefix caching; stops and lengths land
where they do without it; seeded sampling is reproducible; configurations it does not
serve fail naming the field. (Its sampled distribution: test_speculative.py's chi-square
test.)"""

from __future__ import annotations

import json

import pytest
import torch

from pagoda import LLM, SamplingParams
from pagoda.config import EngineConfig
from pagoda.worker.decode_graphs import DecodeGraphs
from tests.engine.test_decode_graphs import RerunCapture
from tests.engine.test_speculative import (
    ALLOWED,
    GREEDY,
    NEW_TOKENS,
    PROMPTS,
    STAT_PROMPT,
    _accepted,
    _generate,
    _llm,
)
from tests.engine.tiny_models import hf_greedy, make_checkpoint, tiny_configs
from tests.models.tiny_pooling import make_decoder_embedder


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """The Llama target, and a Qwen2 draft of other weights sharing its tokenizer."""
    root = tmp_path_factory.mktemp("draft")
    return {"llama": make_checkpoint(root / "llama", tiny_configs()["llama"]),
            "qwen2": make_checkpoint(root / "qwen2", tiny_configs()["qwen2"], seed=1)}


@pytest.fixture(scope="module")
def hf_tokens(checkpoints):
    return hf_greedy(checkpoints["llama"], PROMPTS, NEW_TOKENS)


def _draft(path, k: int = 3) -> dict:
    return {"speculative_method": "draft", "speculative_model": str(path),
            "num_speculative_tokens": k}


def _drafted(outputs) -> int:
    return sum(int(o.metrics.get("spec_draft_tokens", 0)) for o in outputs)


@pytest.mark.parametrize("draft", ["llama", "qwen2"], ids=["self-draft", "qwen2-draft"])
@pytest.mark.parametrize("options", [
    {}, {"max_num_seqs": 1}, {"max_num_batched_tokens": 8}, {"num_kv_blocks": 14},
], ids=["batch", "one-at-a-time", "chunked-prefill", "preemption"])
def test_greedy_tokens_are_hf_greedy(checkpoints, hf_tokens, draft, options):
    """HF's greedy tokens, the second time with the prompts in the prefix cache (the
    draft's cache holds their KV too). The target as its own draft proposes the target's
    own argmax: every draft is accepted."""
    llm = _llm(checkpoints["llama"], **_draft(checkpoints[draft]), **options)
    drafted = accepted = 0
    for _ in range(2):
        outputs = _generate(llm, GREEDY)
        assert [o.outputs[0].token_ids for o in outputs] == hf_tokens
        assert all(o.metrics.get("spec_draft_tokens", 0) > 0 for o in outputs)
        drafted, accepted = drafted + _drafted(outputs), accepted + _accepted(outputs)
    if draft == "llama":
        assert accepted == drafted
    else:
        assert 0 < accepted < drafted
    stats = llm.engine.core.stats()
    assert (stats.spec_draft_tokens, stats.spec_accepted_tokens) == (drafted, accepted)
    if "num_kv_blocks" in options:
        assert stats.num_preemptions > 0
    if "max_num_batched_tokens" not in options:  # (chunks end mid-block: fewer hits)
        assert llm.engine.core.kv_cache.stats.hits > 0


def test_stops_and_lengths_land_as_without_speculation(checkpoints, hf_tokens):
    """Stop tokens (held back by min_tokens), eos and max_tokens end each request where
    they end it without drafts, inside accepted runs (the target is its own draft)."""
    params, prompts = [], []
    for prompt, tokens in zip(PROMPTS, hf_tokens):
        for i in range(2, NEW_TOKENS, 5):
            params.append(SamplingParams(temperature=0.0, max_tokens=i, ignore_eos=True))
            params.append(SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS,
                                         stop_token_ids=[tokens[i]], min_tokens=i))
            prompts += [prompt, prompt]
    target = checkpoints["llama"]
    plain = _generate(_llm(target), params, prompts)
    speculative = _generate(_llm(target, **_draft(target)), params, prompts)
    got = [(o.outputs[0].token_ids, o.outputs[0].finish_reason, o.outputs[0].stop_reason)
           for o in speculative]
    assert got == [(o.outputs[0].token_ids, o.outputs[0].finish_reason,
                    o.outputs[0].stop_reason) for o in plain]
    assert {reason for _, reason, _ in got} == {"stop", "length"}
    assert _accepted(speculative) > 0


def test_seeded_sampling_is_reproducible(checkpoints):
    """A seeded request's drafts and their verification depend on its seed and the
    positions only: the same tokens alone or in a batch, and in an engine that batches
    differently."""
    params = [SamplingParams(temperature=1.0, seed=seed, max_tokens=NEW_TOKENS,
                             ignore_eos=True, allowed_token_ids=ALLOWED) for seed in range(6)]
    prompts = [STAT_PROMPT] * len(params)
    options = _draft(checkpoints["qwen2"])
    llm = _llm(checkpoints["llama"], **options)
    batch = _generate(llm, params, prompts)
    (alone,) = _generate(llm, params[:1], prompts[:1])
    again = _generate(_llm(checkpoints["llama"], **options, max_num_seqs=4), params, prompts)
    assert alone.outputs[0].token_ids == batch[0].outputs[0].token_ids
    assert [o.outputs[0].token_ids for o in again] == [o.outputs[0].token_ids for o in batch]
    assert len({tuple(o.outputs[0].token_ids) for o in batch}) > 1
    assert 0 < _accepted(batch) < _drafted(batch)


def test_the_draft_runs_in_its_own_dtype_and_quantization(checkpoints, hf_tokens):
    """A bfloat16 draft with INT8 weights for a float32 target: its cache too is bfloat16
    (each block's memory budgeted for both caches), and greedy tokens are still HF's
    float32 ones (the target decides them)."""
    # A block of 4 tokens, 2 layers of 2 KV heads of 16, keys and values: 2048 bytes in
    # float32 (the target), 1024 in bfloat16 (the draft).
    llm = _llm(checkpoints["llama"], **_draft(checkpoints["qwen2"]),
               speculative_dtype="bfloat16", speculative_quantization="int8",
               num_kv_blocks=None,
               kv_cache_memory=100 * (2048 + 1024))
    assert llm.engine.core.num_blocks == 100
    outputs = _generate(llm, GREEDY)
    assert [o.outputs[0].token_ids for o in outputs] == hf_tokens
    worker = llm.engine.core.executor.worker
    assert next(worker.draft.model.parameters()).dtype == torch.bfloat16
    assert worker.runner.drafter.kv_caches[0].dtype == torch.bfloat16
    assert next(worker.model.parameters()).dtype == torch.float32
    assert {m.quant_method.name for m in worker.draft.model.modules()
            if hasattr(m, "quant_method")} == {"int8"}
    assert worker.quant_method.name != "int8"


def test_the_drafts_single_token_forwards_replay_decode_graphs(checkpoints, hf_tokens):
    """The draft's forwards of one token a request go through decode graphs (a stand-in
    capture that re-runs the function on the static buffers, as test_decode_graphs.py's):
    the target as its own draft still has every draft accepted (greedy tokens are the
    target's whatever the drafts)."""
    llm = _llm(checkpoints["llama"], **_draft(checkpoints["llama"]),
               attention_backend="reference")
    drafter = llm.engine.core.executor.worker.runner.drafter
    capture = RerunCapture()
    graphs = DecodeGraphs(drafter.model, drafter.kv_caches, drafter.builder, capture,
                          [1, 2, 4], max_blocks_per_seq=16, block_size=4,
                          device=drafter.device)
    graphs.capture_all()
    drafter.graphs = [graphs]
    outputs = _generate(llm, GREEDY)
    assert [o.outputs[0].token_ids for o in outputs] == hf_tokens
    assert capture.replays >= 2 * (NEW_TOKENS // 4)  # two a step after the first at least
    assert _accepted(outputs) == _drafted(outputs) > 0


@pytest.mark.parametrize(("options", "match"), [
    ({"speculative_method": "draft"}, "speculative_model: needed by speculative_method draft"),
    ({"speculative_method": "ngram", "speculative_model": "x"}, "speculative_model: needed"),
    ({"speculative_method": "draft", "speculative_model": "x", "speculative_dtype": "fp7"},
     "dtype must be auto or one of"),
])
def test_config_checks_name_the_field(options, match):
    with pytest.raises(ValueError, match=match):
        EngineConfig.from_kwargs(device="cpu", **options)


@pytest.mark.parametrize("parallel", ["tensor_parallel_size", "pipeline_parallel_size"])
def test_a_draft_model_on_several_devices_is_refused(checkpoints, parallel):
    with pytest.raises(ValueError, match="speculative_method draft: not supported with"):
        _llm(checkpoints["llama"], **_draft(checkpoints["qwen2"]), **{parallel: 2})


def test_a_draft_of_another_vocabulary_is_refused(checkpoints, tmp_path):
    config = tiny_configs()["qwen2"]
    config.vocab_size = 128
    small = make_checkpoint(tmp_path / "small", config)
    with pytest.raises(ValueError, match="speculative_model: .* vocabulary of 128 tokens"):
        _llm(checkpoints["llama"], **_draft(small))


def test_a_draft_with_another_tokenizer_is_refused(checkpoints, tmp_path):
    other = make_checkpoint(tmp_path / "other", tiny_configs()["qwen2"])
    tokenizer = json.loads((other / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    vocab["w3"], vocab["w4"] = vocab["w4"], vocab["w3"]
    (other / "tokenizer.json").write_text(json.dumps(tokenizer))
    with pytest.raises(ValueError, match="speculative_model: .* maps tokens to ids other"):
        _llm(checkpoints["llama"], **_draft(other))


def test_a_draft_that_pools_is_refused(checkpoints, tmp_path):
    embedder = make_decoder_embedder(tmp_path / "embedder")
    with pytest.raises(ValueError, match="speculative_model .*: .* is a pooling model"):
        LLM(str(checkpoints["llama"]), dtype="float32", device="cpu", num_kv_blocks=64,
            **_draft(embedder))
