"""Pooling models on an NVIDIA GPU (run by ci/gpu.sh): a decoder embedder (Triton
attention over the paged cache, overlapped steps, chunked prefill, the profiling step that
sizes the cache), a BERT encoder and a BERT cross-encoder give HF transformers' outputs
(float32; bfloat16 within its rounding)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from pagoda import LLM, PoolingParams
from tests.engine.tiny_models import VOCAB
from tests.models.tiny_pooling import (
    hf_cross_encoder_scores,
    hf_hidden_states,
    make_bert_embedder,
    make_cross_encoder,
    make_decoder_embedder,
    pooled,
)

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs an NVIDIA GPU, its driver and a CUDA build of torch "
                              "(run ci/gpu.sh on a GPU machine)"),
]

rng = random.Random(17)
PROMPTS = [[rng.randrange(3, VOCAB) for _ in range(n)] for n in (3, 40, 9, 130, 1, 17)]
TEXTS = ["the cat sat on the mat", "a dog", "where is the big red house", "cats and dogs"]


def _embed(llm: LLM, prompts: list, **params: object) -> torch.Tensor:
    outputs = llm.embed(prompts, PoolingParams(**params), use_tqdm=False)
    return torch.tensor([o.outputs.embedding for o in outputs])


@pytest.mark.parametrize("options", [
    {"num_kv_blocks": 128, "block_size": 16, "max_num_batched_tokens": 32},
    {"gpu_memory_utilization": 0.2},  # the profiling step, without logits
])
def test_decoder_embedder_matches_hf(tmp_path: Path, options: dict) -> None:
    path = make_decoder_embedder(tmp_path)
    want = torch.stack([pooled(h, "last", True) for h in hf_hidden_states(path, PROMPTS)])
    llm = LLM(str(path), device="cuda", dtype="float32", **options)
    assert llm.engine.core.info["attention_backend"] == "triton"
    assert llm.engine.core.async_scheduling
    got = _embed(llm, [{"prompt_token_ids": p} for p in PROMPTS])
    assert (got - want).abs().max() <= 1e-4
    bf16 = _embed(LLM(str(path), device="cuda", dtype="bfloat16", num_kv_blocks=128),
                  [{"prompt_token_ids": p} for p in PROMPTS])
    assert torch.nn.functional.cosine_similarity(bf16, want).min() >= 0.99


def test_bert_embedder_matches_hf(tmp_path: Path) -> None:
    path = make_bert_embedder(tmp_path)
    from transformers import AutoTokenizer

    ids = [AutoTokenizer.from_pretrained(path).encode(t) for t in TEXTS]
    want = torch.stack([pooled(h, "mean", False) for h in hf_hidden_states(path, ids)])
    got = _embed(LLM(str(path), device="cuda", dtype="float32"), TEXTS)
    assert (got - want).abs().max() <= 1e-4
    bf16 = _embed(LLM(str(path), device="cuda", dtype="bfloat16"), TEXTS)
    assert torch.nn.functional.cosine_similarity(bf16, want).min() >= 0.99


def test_cross_encoder_matches_hf(tmp_path: Path) -> None:
    path = make_cross_encoder(tmp_path)
    pairs = [("where is the cat", t) for t in TEXTS]
    want = hf_cross_encoder_scores(path, pairs)
    llm = LLM(str(path), device="cuda", dtype="float32")
    got = [o.outputs.score for o in llm.score(pairs[0][0], TEXTS, use_tqdm=False)]
    assert got == pytest.approx(want, abs=1e-4)
