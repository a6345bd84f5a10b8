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


def test_engine_reports_the_method(dense, packed):
    assert packed.engine.core.info["quantization"] == "gguf"
    assert dense.engine.core.info["quantization"] == "none"


def test_greedy_tokens_match_dense(dense, packed):
    prompts = [_chat_ids(dense, q) for q in QUESTIONS]
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    outputs = packed.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    for prompt, out in zip(prompts, outputs):
        ours = out.outputs[0].token_ids
        assert len(ours) == NEW_TOKENS
        # The dense model's logprobs along our text: its top choice must be ours, or a near-tie.
        for i, entry in enumerate(_prompt_logprobs(dense, prompt + ours, 1)[len(prompt) - 1:]):
            if entry.rank != 1:
                gap = entry.logprobs[1] - entry.logprobs[0]
                assert gap < TIE_MARGIN, f"token {i} of {out.prompt!r}: logprob gap {gap:.3f}"
                break  # after a near-tie flip the texts legitimately differ


def test_prompt_logprobs_close_to_dense(dense, packed):
    ids = _chat_ids(dense, QUESTIONS[1])
    ours = torch.tensor([e.logprobs[0] for e in _prompt_logprobs(packed, ids, 0)])
    ref = torch.tensor([e.logprobs[0] for e in _prompt_logprobs(dense, ids, 0)])
    assert (ours - ref).abs().mean() < 0.05
    torch.testing.assert_close(ours, ref, atol=0.15, rtol=0.02)


def test_the_tied_head_reads_the_quantized_table_for_few_rows(dense, packed):
    """The Q8_0 vocabulary table stays quantized for the head (the embedding keeps its dense
    copy for lookups): up to QUANTIZED_HEAD_MAX_ROWS rows the logits come from the codes,
    equal to the dense table's up to float32 rounding (the dense table is the codes
    dequantized); more rows use the dense table."""
    from pagoda.models.layers.embedding import QUANTIZED_HEAD_MAX_ROWS

    head = packed.engine.core.executor.worker.model.lm_head
    assert head.qweight is not None
    assert dense.engine.core.executor.worker.model.lm_head.qweight is None
    hidden = torch.randn(QUANTIZED_HEAD_MAX_ROWS + 1, head.weight.shape[1],
                         generator=torch.Generator().manual_seed(0))
    want = hidden @ head.weight.T
    few = head(hidden[:3])
    torch.testing.assert_close(few, want[:3], atol=2e-4, rtol=1e-4)
    assert torch.equal(head(hidden), head._linear(hidden, head.weight))  # the platform's linear
