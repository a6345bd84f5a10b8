"""The dense families on the shared decoder (Llama, Mistral, Qwen2, Qwen3, Gemma 2, Gemma 3,
Phi-3) match HF transformers logits through the paged cache."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import (
    Gemma2Config,
    Gemma3TextConfig,
    LlamaConfig,
    MistralConfig,
    Phi3Config,
    PreTrainedModel,
    Qwen2Config,
    Qwen3Config,
)

from pagoda.attention.reference import ReferenceAttentionBackend
from pagoda.models import load_model
from pagoda.ops import OpTable, use_ops
from tests.models.model_harness import (
    check_mixed_batch,
    check_prefill_then_decode,
    random_hf_model,
    save_checkpoint,
    tiny_config,
)

ATOL = RTOL = 1e-4

CASES = {
    "llama-sharded": (LlamaConfig, {}, "40KB"),
    "llama-llama3-rope-tied-bias": (
        LlamaConfig,
        dict(
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 10000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32,
            },
            tie_word_embeddings=True,
            attention_bias=True,
            mlp_bias=True,
        ),
        None,
    ),
    "llama-linear-rope": (
        LlamaConfig,
        dict(rope_theta=500.0, rope_scaling={"type": "linear", "factor": 2.0}),
        None,
    ),
    "mistral-sliding": (MistralConfig, dict(sliding_window=5, head_dim=8), None),
    "qwen2-sliding-tied": (
        Qwen2Config,
        dict(
            num_hidden_layers=3,
            use_sliding_window=True,
            sliding_window=6,
            max_window_layers=1,
            tie_word_embeddings=True,
        ),
        None,
    ),
    "qwen3-head-dim": (Qwen3Config, dict(head_dim=24), None),
    "qwen3-yarn": (
        Qwen3Config,
        dict(
            head_dim=16,
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 32,
            },
        ),
        None,
    ),
    # Soft caps near the scores' and logits' size; windows shorter than the prompts.
    "gemma2-softcaps-window": (
        Gemma2Config,
        dict(head_dim=16, query_pre_attn_scalar=24, sliding_window=5,
             attn_logit_softcapping=2.0, final_logit_softcapping=3.0),
        None,
    ),
    "gemma3-rope-per-layer-type": (
        Gemma3TextConfig,
        dict(head_dim=16, query_pre_attn_scalar=24, sliding_window=5, num_hidden_layers=3,
             sliding_window_pattern=2, final_logit_softcapping=3.0, rope_theta=10000.0,
             rope_local_base_freq=100.0, rope_scaling={"rope_type": "linear", "factor": 8.0},
             tie_word_embeddings=False),
        "40KB",
    ),
    "phi3-partial-rotary-longrope": (
        Phi3Config,
        dict(partial_rotary_factor=0.5, sliding_window=6, pad_token_id=0,
             original_max_position_embeddings=32,
             rope_scaling={"type": "longrope", "short_factor": [1.0, 1.5, 2.0, 3.0],
                           "long_factor": [2.0, 4.0, 8.0, 16.0]}),
        "40KB",
    ),
}


def _backend(name: str) -> tuple[OpTable, type]:
    if name == "cpu":
        from pagoda_cpu.attention import CpuSdpaAttentionBackend

        return OpTable("cpu"), CpuSdpaAttentionBackend
    return OpTable.reference(), ReferenceAttentionBackend


@pytest.fixture(scope="module", params=list(CASES))
def checkpoint(request, tmp_path_factory) -> tuple[Path, PreTrainedModel]:
    cls, overrides, max_shard_size = CASES[request.param]
    hf_model = random_hf_model(tiny_config(cls, **overrides))
    path = save_checkpoint(hf_model, tmp_path_factory.mktemp(request.param), max_shard_size)
    return path, hf_model


@pytest.fixture(params=["reference", "cpu"])
def model(request, checkpoint) -> torch.nn.Module:
    table, backend = _backend(request.param)
    with use_ops(table):
        return load_model(
            checkpoint[0], dtype=torch.float32, device=torch.device("cpu"), attn_backend=backend
        )



def test_prefill_then_decode_matches_hf(model, checkpoint):
    check_prefill_then_decode(model, checkpoint[1], atol=ATOL, rtol=RTOL)


def test_mixed_batch_matches_each_sequence_alone(model, checkpoint):
    check_mixed_batch(model, checkpoint[1], atol=ATOL, rtol=RTOL)
