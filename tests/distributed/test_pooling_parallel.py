"""Pooling models over two tensor-parallel worker processes (gloo, on the CPU): a BERT
cross-encoder (heads, MLP features, vocabulary, positions and segments split) and a decoder
embedder give HF transformers' outputs, which travel back from the workers; a pooling
model on several pipeline stages is refused."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from pagoda import LLM
from tests.engine.tiny_models import VOCAB
from tests.models.tiny_pooling import (
    hf_cross_encoder_scores,
    hf_hidden_states,
    make_cross_encoder,
    make_decoder_embedder,
    pooled,
)

ATOL = 1e-5


def test_tensor_parallel_cross_encoder(tmp_path: Path) -> None:
    path = make_cross_encoder(tmp_path)
    pairs = [("where is the cat", "the cat sat on the mat"), ("what runs", "a dog runs fast"),
             ("the big house", "a red house")]
    want = hf_cross_encoder_scores(path, pairs)
    llm = LLM(str(path), dtype="float32", device="cpu", tensor_parallel_size=2)
    try:
        got = llm.score([a for a, _ in pairs], [b for _, b in pairs], use_tqdm=False)
        assert [o.outputs.score for o in got] == pytest.approx(want, abs=ATOL)
    finally:
        llm.engine.shutdown()


def test_tensor_parallel_decoder_embedder(tmp_path: Path) -> None:
    path = make_decoder_embedder(tmp_path)
    rng = random.Random(3)
    prompts = [[rng.randrange(3, VOCAB) for _ in range(n)] for n in (5, 19, 1, 11)]
    want = torch.stack([pooled(h, "last", True) for h in hf_hidden_states(path, prompts)])
    llm = LLM(str(path), dtype="float32", device="cpu", tensor_parallel_size=2,
              max_num_batched_tokens=8, num_kv_blocks=32, block_size=4)
    try:
        got = llm.embed([{"prompt_token_ids": p} for p in prompts], use_tqdm=False)
        assert (torch.tensor([o.outputs.embedding for o in got]) - want).abs().max() <= ATOL
    finally:
        llm.engine.shutdown()


def test_pooling_models_run_on_one_pipeline_stage(tmp_path: Path) -> None:
    path = make_decoder_embedder(tmp_path)
    with pytest.raises(Exception, match="pipeline_parallel_size > 1 is not supported for "
                                        "pooling models"):
        LLM(str(path), device="cpu", pipeline_parallel_size=2)
