"""SmolLM2 with Q4_1 weights kept packed against the same file dequantized (float32)."""

from __future__ import annotations

import pytest
import torch

from pagoda import LLM, SamplingParams

pytest.importorskip("pagoda_cpu")

QUESTIONS = ["What is the capital of Germany?", "Write a haiku about the sea.",
             "List three primary colors."]
NEW_TOKENS = 24
# bfloat16 activations, outputs, scales and zeros in the int4 kernel each move a logprob by up
# to ~0.1-0.17 here (the dense bfloat16 path: ~0.46), so a gap below this may flip.
TIE_MARGIN = 0.25


@pytest.fixture(scope="module")
def smollm2_path():
    from pagoda.model_source import resolve_model

    return str(resolve_model("smollm2-135m-instruct").path)


@pytest.fixture(scope="module")
def dense(smollm2_path):
    return LLM(smollm2_path, dtype="float32", max_model_len=1024, quantization="none")


@pytest.fixture(scope="module")
def packed(smollm2_path):
    return LLM(smollm2_path, dtype="float32", max_model_len=1024, quantization="gguf")


def _chat_ids(llm: LLM, question: str) -> list[int]:
    return llm.apply_chat_template([{"role": "user", "content": question}],
                                   add_generation_prompt=True)


def _prompt_logprobs(llm: LLM, ids: list[int], top: int) -> list:
    params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=top)
    (out,) = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)
    return out.prompt_logprobs[1:]


def _assert_follows_dense(dense: LLM, prompt: list[int], out, margin: float) -> None:
    """The dense model's logprobs along `out`'s text: its top choice must be ours, or a
    near-tie (closer than `margin`), after which the texts legitimately differ."""
    ours = out.outputs[0].token_ids
    assert len(ours) == NEW_TOKENS
    for i, entry in enumerate(_prompt_logprobs(dense, prompt + ours, 1)[len(prompt) - 1:]):
        if entry.rank != 1:
            gap = entry.logprobs[1] - entry.logprobs[0]
            assert gap < margin, f"token {i} of {out.prompt!r}: logprob gap {gap:.3f}"
            break


def _prompt_logprobs_against_dense(dense: LLM, other: LLM) -> tuple[torch.Tensor, torch.Tensor]:
    """`other`'s and the dense model's logprobs of one chat prompt's tokens."""
    ids = _chat_ids(dense, QUESTIONS[1])
    return tuple(torch.tensor([e.logprobs[0] for e in _prompt_logprobs(llm, ids, 0)])
                 for llm in (other, dense))


def test_engine_reports_the_method(dense, packed):
    assert packed.engine.core.info["quantization"] == "gguf"
    assert dense.engine.core.info["quantization"] == "none"


def test_greedy_tokens_match_dense(dense, packed):
    prompts = [_chat_ids(dense, q) for q in QUESTIONS]
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    outputs = packed.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    for prompt, out in zip(prompts, outputs):
        _assert_follows_dense(dense, prompt, out, TIE_MARGIN)


def test_prompt_logprobs_close_to_dense(dense, packed):
    ours, ref = _prompt_logprobs_against_dense(dense, packed)
    assert (ours - ref).abs().mean() < 0.05
    torch.testing.assert_close(ours, ref, atol=0.15, rtol=0.02)


def test_the_tied_head_reads_the_quantized_table_for_few_rows(dense, packed):
    """The Q8_0 vocabulary table stays quantized for the head (the embedding keeps its dense
    copy for lookups): up to the platform's `quantized_head_max_rows` the logits come from the codes,
    equal to the dense table's up to float32 rounding (the dense table is the codes
    dequantized); more rows use the dense table."""
    from pagoda.platforms import resolve_platform

    head = packed.engine.core.executor.worker.model.lm_head
    assert head.qweight is not None
    assert dense.engine.core.executor.worker.model.lm_head.qweight is None
    assert head.quantized_max_rows == resolve_platform("cpu").quantized_head_max_rows(
        torch.float32) >= 16
    hidden = torch.randn(head.quantized_max_rows + 1, head.weight.shape[1],
                         generator=torch.Generator().manual_seed(0))
    want = hidden @ head.weight.T
    few = head(hidden[:3])
    torch.testing.assert_close(few, want[:3], atol=2e-4, rtol=1e-4)
    assert torch.equal(head(hidden), head._linear(hidden, head.weight))  # the platform's linear


# gguf_a8: the same weights, the activations rounded to int8 blocks of 32 (llama.cpp's
# numerics). Rounding 576-1536 activations a block to 8 bits moves this 135M model's
# prompt logprobs by ~0.08 on average against the float products (measured), up to ~0.5 on
# a few tokens, so its greedy text may leave the dense model's at a gap below A8_TIE_MARGIN.
A8_TIE_MARGIN = 0.6


@pytest.fixture(scope="module")
def a8(smollm2_path):
    return LLM(smollm2_path, dtype="float32", max_model_len=1024, quantization="gguf_a8",
               max_num_seqs=4, max_num_batched_tokens=64)


def test_a8_rounds_the_activations_of_every_kept_weight(a8):
    from pagoda.quant.tensors import round_activations

    assert a8.engine.core.info["quantization"] == "gguf_a8"
    model = a8.engine.core.executor.worker.model
    layer = model.model.layers[0].mlp.down_proj
    assert layer.qweight.act_block == 32 and model.lm_head.qweight.act_block == 32
    # The head: its quantized rows and its dense table's take the same rounded hidden.
    head = model.lm_head
    hidden = torch.randn(3, head.weight.shape[1], generator=torch.Generator().manual_seed(1))
    want = round_activations(hidden, 32) @ head.weight.T
    torch.testing.assert_close(head(hidden), want, atol=2e-4, rtol=1e-4)
    copies = head.quantized_max_rows // 3 + 1  # past the quantized table's rows: the dense one
    many = hidden.repeat(copies, 1)
    torch.testing.assert_close(head(many), want.repeat(copies, 1), atol=2e-4, rtol=1e-4)


def test_a8_greedy_tokens_follow_dense_alone_and_in_a_batch(dense, a8):
    """Against the dense model (a near-tie may flip at A8_TIE_MARGIN), prompts alone and in a
    batch prefilled in chunks of 64 tokens. Not token for token alone against batched:
    rounding to 8 bits turns the batch's float32 summation-order differences (~1e-6) into a
    whole rounding step wherever a value lies near a half (a third prompt's logprobs moved
    by up to 0.17 here), as with any dynamically quantized activations."""
    prompts = [_chat_ids(dense, q) for q in QUESTIONS]
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    batch = a8.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    alone = [a8.generate([{"prompt_token_ids": p}], params, use_tqdm=False)[0] for p in prompts]
    for prompt, out in zip(prompts * 2, batch + alone):
        _assert_follows_dense(dense, prompt, out, A8_TIE_MARGIN)


def test_a8_prompt_logprobs_close_to_dense(dense, a8):
    ours, ref = _prompt_logprobs_against_dense(dense, a8)
    assert (ours - ref).abs().mean() < 0.15
    torch.testing.assert_close(ours, ref, atol=0.6, rtol=0.05)
