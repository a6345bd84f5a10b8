"""Structured outputs on an NVIDIA GPU (run by ci/gpu.sh): steps overlap, so a structured
step is launched before the step in flight is read back and samples once its bitmask
(from pinned memory) comes; every sample follows its grammar, greedy tokens equal those
of an engine that never overlaps, and forced tokens of a thinking budget land in place."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("pagoda_cuda", reason="pagoda-cuda is not installed")
pytest.importorskip("xgrammar", reason="structured outputs need xgrammar")

from pagoda import LLM, SamplingParams  # noqa: E402
from tests.engine.test_structured_outputs import (  # noqa: E402
    GRAMMARS,
    MAX_TOKENS,
    PROMPTS,
    _check_follows,
    _mixed,
)
from tests.engine.tiny_models import (  # noqa: E402
    VOCAB,
    make_checkpoint,
    save_char_tokenizer,
    tiny_configs,
)

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs an NVIDIA GPU, its driver and a CUDA build of torch "
                              "(run ci/gpu.sh on a GPU machine)"),
]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    path = make_checkpoint(tmp_path_factory.mktemp("llama"), tiny_configs()["llama"])
    assert save_char_tokenizer(path) < VOCAB
    return path


def _llm(path: Path, **options) -> LLM:
    return LLM(str(path), device="cuda", dtype="float32", num_kv_blocks=256, block_size=16,
               **options)


def test_overlapped_structured_steps(checkpoint: Path) -> None:
    import xgrammar as xgr
    from transformers import AutoTokenizer

    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(
        AutoTokenizer.from_pretrained(checkpoint), vocab_size=VOCAB))
    overlapped = _llm(checkpoint)
    assert overlapped.engine.core.depth >= 1  # the GPU runs asynchronously: steps overlap
    provided = []
    executor = overlapped.engine.core.executor
    original = executor.provide_token_bitmask
    executor.provide_token_bitmask = lambda bitmask: (provided.append(1), original(bitmask))[1]
    got = _mixed(overlapped)
    assert len(provided) >= MAX_TOKENS
    reference = _mixed(_llm(checkpoint, async_scheduling=False))
    assert [c.token_ids for c in got] == [c.token_ids for c in reference]
    for i in range(len(PROMPTS)):
        _check_follows(compiler, GRAMMARS[sorted(GRAMMARS)[i]], got[2 * i + 1], MAX_TOKENS)


def test_thinking_budget_forced_tokens(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path, tiny_configs()["llama"])  # words: "w7" is token 7
    llm = _llm(path)
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True,
                            thinking_budget=3, thinking_end="w7 w9")
    free = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    prompts = [{"prompt_token_ids": p} for p in ([5, 6, 8], [40, 41, 42, 43])]
    for budgeted, plain in zip(llm.generate(prompts, params, use_tqdm=False),
                               llm.generate(prompts, free, use_tqdm=False)):
        tokens, expected = budgeted.outputs[0].token_ids, plain.outputs[0].token_ids
        assert tokens[:3] == expected[:3] and tokens[3:5] == [7, 9], (tokens, expected)
