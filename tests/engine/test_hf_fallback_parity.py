"""The transformers fallback through the whole engine: greedy tokens identical to HF
transformers' own generate, for architectures Pagoda has no class for, in every
scheduling regime; a forced fallback on a Llama gives the native class's tokens; a model
it cannot run fails at load, saying why."""

from __future__ import annotations

import pytest
from transformers import Gemma2Config, GPT2Config, GPTNeoConfig, GPTNeoXConfig

from pagoda import LLM, SamplingParams
from tests.engine.test_hf_parity import MIXED, SHARED
from tests.engine.tiny_models import (
    VOCAB,
    hf_greedy,
    make_checkpoint,
    save_tokenizer,
    tiny_configs,
)

NEW_TOKENS = 12
_SIZES = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, max_position_embeddings=512, bos_token_id=1,
              eos_token_id=2)
CONFIGS = {
    "gpt-neox": GPTNeoXConfig(**_SIZES, rotary_pct=0.25, tie_word_embeddings=False),
    "gpt2": GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=512,
                       bos_token_id=1, eos_token_id=2),
}
GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)


def _generate(llm: LLM, prompts: list[list[int]]) -> list[list[int]]:
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outputs]


@pytest.fixture(scope="module", params=list(CONFIGS))
def checkpoint(request, tmp_path_factory):
    """(model dir, HF greedy outputs for MIXED and SHARED)."""
    path = make_checkpoint(tmp_path_factory.mktemp(request.param), CONFIGS[request.param])
    expected = hf_greedy(path, MIXED + SHARED, NEW_TOKENS)
    return path, expected[: len(MIXED)], expected[len(MIXED):]


def test_batches_of_one_and_of_mixed_lengths(checkpoint):
    path, expected, _ = checkpoint
    llm = LLM(str(path), dtype="float32", device="cpu", num_kv_blocks=256)
    assert llm.engine.core.info["model_class"] == "TransformersForCausalLM"
    for prompt, want in zip(MIXED[:2], expected[:2]):
        assert _generate(llm, [prompt]) == [want]
    assert _generate(llm, MIXED) == expected


def test_chunked_prefill_and_prefix_caching(checkpoint):
    path, expected, expected_shared = checkpoint
    llm = LLM(str(path), dtype="float32", device="cpu", max_num_batched_tokens=8,
              num_kv_blocks=256, block_size=4)
    assert _generate(llm, MIXED) == expected
    assert _generate(llm, SHARED[:1]) == expected_shared[:1]
    assert _generate(llm, SHARED) == expected_shared
    assert llm.engine.core.stats().prefix_cache_hits >= 3 * 20  # the 21-token prefix


def test_preemption_with_a_tiny_kv_cache(checkpoint):
    path, expected, _ = checkpoint
    llm = LLM(str(path), dtype="float32", device="cpu", num_kv_blocks=14, block_size=4)
    assert _generate(llm, MIXED) == expected
    stats = llm.engine.core.stats()
    assert stats.num_preemptions > 0
    assert stats.kv_cache_usage == 0.0


def test_soft_capped_sliding_attention_through_the_fallback(tmp_path):
    """Gemma 2 (soft-capped attention and logits, alternating sliding layers), forced onto
    the fallback: HF's tokens, and the native class's."""
    config = Gemma2Config(**_SIZES, num_key_value_heads=2, head_dim=16, sliding_window=6,
                          attn_logit_softcapping=2.0, final_logit_softcapping=3.0)
    path = make_checkpoint(tmp_path, config)
    common = dict(dtype="float32", device="cpu", num_kv_blocks=256, block_size=4)
    fallback = LLM(str(path), model_impl="transformers", **common)
    assert fallback.engine.core.info["model_class"] == "TransformersForCausalLM"
    prompts = MIXED[:4]
    expected = hf_greedy(path, prompts, NEW_TOKENS)
    assert _generate(fallback, prompts) == expected
    assert _generate(LLM(str(path), **common), prompts) == expected


def test_forced_fallback_gives_the_native_llamas_tokens(tmp_path):
    path = make_checkpoint(tmp_path, tiny_configs()["llama"])
    expected = hf_greedy(path, MIXED, NEW_TOKENS)
    native = LLM(str(path), dtype="float32", device="cpu", num_kv_blocks=256)
    fallback = LLM(str(path), dtype="float32", device="cpu", num_kv_blocks=256,
                   model_impl="transformers")
    assert fallback.engine.core.info["model_class"] == "TransformersForCausalLM"
    assert native.engine.core.info["model_class"] == "LlamaForCausalLM"
    assert _generate(fallback, MIXED) == _generate(native, MIXED) == expected


def test_a_model_without_attention_interface_support_is_refused(tmp_path):
    GPTNeoConfig(vocab_size=VOCAB, hidden_size=64, num_layers=2, num_heads=4,
                 attention_types=[[["global"], 2]],
                 architectures=["GPTNeoForCausalLM"]).save_pretrained(tmp_path)
    save_tokenizer(tmp_path)
    with pytest.raises(Exception, match="GPTNeoForCausalLM does not support the attention "
                                        "interface"):
        LLM(str(tmp_path), dtype="float32", device="cpu", load_format="dummy",
            num_kv_blocks=16)


@pytest.mark.parametrize(("arch", "options", "message"), [
    ("gpt2", {"model_impl": "pagoda"},
     "GPT2LMHeadModel with model_impl='pagoda': Pagoda has no class for it"),
    ("gpt-neox", {"quantization": "int8"},
     "runs unquantized weights only, not quantization 'int8'"),
    ("gpt-neox", {"tensor_parallel_size": 2}, "runs on one device: tensor_parallel_size 2"),
], ids=["pagoda-impl-missing", "quantization", "tensor-parallel"])
def test_what_the_fallback_cannot_run_is_refused(tmp_path, arch, options, message):
    CONFIGS[arch].save_pretrained(tmp_path)
    save_tokenizer(tmp_path)
    with pytest.raises(Exception, match=message):
        LLM(str(tmp_path), dtype="float32", device="cpu", load_format="dummy",
            num_kv_blocks=16, **options)


def test_padded_decode_graph_replays(checkpoint):
    """Decode steps through DecodeGraphs' static, padded buffers (replayed by re-running,
    the CPU's stand-in for a device graph) give HF's tokens: padding rows (no slot, no
    keys) pass through the HF model harmlessly."""
    from pagoda.worker.decode_graphs import DecodeGraphs
    from tests.engine.test_decode_graphs import RerunCapture

    path, expected, _ = checkpoint
    llm = LLM(str(path), device="cpu", dtype="float32", attention_backend="reference",
              num_kv_blocks=256, block_size=4)  # (reference: reads only the metadata's tensors)
    worker = llm.engine.core.executor.worker
    runner, capture = worker.runner, RerunCapture()
    graphs = DecodeGraphs(worker.model, runner.kv_caches, runner.builder, capture,
                          [2, 8], max_blocks_per_seq=16, block_size=4,
                          device=runner.device)
    graphs.capture_all()
    runner.graphs = [graphs]
    assert _generate(llm, MIXED) == expected
    assert capture.replays >= NEW_TOKENS - 1
