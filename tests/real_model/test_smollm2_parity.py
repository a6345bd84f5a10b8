"""Our SmolLM2 (GGUF, float32) against transformers' own GGUF load of the same file."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from pagoda import LLM, SamplingParams

QUESTIONS = [
    "What is the capital of Germany?",
    "Write a haiku about the sea.",
    "List three primary colors.",
    "Explain what a compiler does in one sentence.",
]
NEW_TOKENS = 24
TIE_MARGIN = 0.05  # logits closer than this may legitimately flip between implementations


@pytest.fixture(scope="module")
def hf_model(smollm2):
    model = AutoModelForCausalLM.from_pretrained(
        smollm2.path.parent, gguf_file=smollm2.path.name, dtype=torch.float32)
    return model.eval()


@pytest.fixture(scope="module")
def llm():
    return LLM("smollm2-135m-instruct", dtype="float32", max_model_len=1024)


def _chat_ids(llm: LLM, question: str) -> list[int]:
    return llm.apply_chat_template([{"role": "user", "content": question}],
                                   add_generation_prompt=True)


@torch.inference_mode()
def _hf_logits(hf_model, ids: list[int]) -> torch.Tensor:
    return hf_model(torch.tensor([ids])).logits[0].float()


def test_greedy_tokens_match_transformers(llm, hf_model):
    prompts = [_chat_ids(llm, q) for q in QUESTIONS]
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    for prompt, out in zip(prompts, outputs):
        ours = out.outputs[0].token_ids
        logits = _hf_logits(hf_model, prompt + ours)
        for i, token in enumerate(ours):
            row = logits[len(prompt) - 1 + i]
            best = int(row.argmax())
            if token != best:
                # Only a near-tie may differ, and then the rest of the text legitimately does.
                assert row[best] - row[token] < TIE_MARGIN, (
                    f"token {i} of {out.prompt!r}: ours {token}, HF {best} "
                    f"(logit gap {float(row[best] - row[token]):.3f})")
                break
        assert len(ours) == NEW_TOKENS


def test_prompt_logprobs_close_to_transformers(llm, hf_model):
    prompt = _chat_ids(llm, QUESTIONS[1])
    params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0)
    (out,) = llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)
    ref = _hf_logits(hf_model, prompt).log_softmax(-1)
    ours = torch.tensor([entry.logprobs[0] for entry in out.prompt_logprobs[1:]])
    expected = ref[torch.arange(len(prompt) - 1), torch.tensor(prompt[1:])]
    torch.testing.assert_close(ours, expected, atol=2e-3, rtol=1e-3)


def test_default_llm_answers_paris():
    llm = LLM()
    (out,) = llm.chat([{"role": "user", "content": "What is the capital of France?"}],
                      SamplingParams(temperature=0.0, max_tokens=32), use_tqdm=False)
    assert "Paris" in out.outputs[0].text
    assert out.outputs[0].finish_reason == "stop"
