"""A config asking for what the decoder does not implement fails as the model is built,
with an error naming the config field."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import Gemma2Config, Gemma3TextConfig, LlamaConfig

from pagoda import LLM
from pagoda.attention.reference import ReferenceAttentionBackend
from pagoda.models import resolve_model_class
from pagoda.ops import OpTable, use_ops
from tests.engine.tiny_models import LONGROPE_CONTEXT, dense_family_configs, make_checkpoint
from tests.models.model_harness import tiny_config

GEMMA = dict(head_dim=16, query_pre_attn_scalar=16, sliding_window=8)
LONGROPE = {"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8,
            "original_max_position_embeddings": 64, "rope_theta": 10000.0}


def _build(config) -> torch.nn.Module:
    with use_ops(OpTable.reference()):
        return resolve_model_class(config)(config, dtype=torch.float32,
                                           attn_backend=ReferenceAttentionBackend)


CASES = {
    "rope type": (
        tiny_config(LlamaConfig, rope_parameters={"rope_type": "mrope", "rope_theta": 1e4}),
        r"Unsupported rope_parameters\.rope_type 'mrope' \(supported: default, linear"),
    "rope setting": (
        tiny_config(LlamaConfig, rope_parameters={"rope_type": "linear", "factor": 2.0,
                                                  "mrope_section": [2, 2, 4],
                                                  "rope_theta": 1e4}),
        r"Unsupported rope_parameters settings for rope_type 'linear': mrope_section"),
    "rope type of one layer type": (
        tiny_config(Gemma3TextConfig, **GEMMA, sliding_window_pattern=2,
                    rope_parameters={"full_attention": {"rope_type": "ntk", "rope_theta": 1e6},
                                     "sliding_attention": {"rope_type": "default",
                                                           "rope_theta": 1e4}}),
        r"Unsupported rope_parameters\['full_attention'\]\.rope_type 'ntk'"),
    "longrope factors": (
        tiny_config(LlamaConfig, rope_parameters={**LONGROPE, "short_factor": [1.0] * 5}),
        r"rope_parameters\.short_factor has 5 entries, the rotary dimension 16 needs 8"),
    "hidden_act": (tiny_config(LlamaConfig, hidden_act="relu"),
                   r"Unsupported hidden_act 'relu' \(supported: silu, gelu, gelu_pytorch_tanh\)"),
    "hidden_activation": (tiny_config(Gemma2Config, **GEMMA, hidden_activation="gelu_new"),
                          r"Unsupported hidden_activation 'gelu_new'"),
    "bidirectional": (tiny_config(Gemma2Config, **GEMMA, use_bidirectional_attention=True),
                      r"Unsupported use_bidirectional_attention=True: only causal"),
    "gemma3 attention soft cap": (
        tiny_config(Gemma3TextConfig, **GEMMA, attn_logit_softcapping=50.0),
        r"Unsupported attn_logit_softcapping=50\.0: Gemma 3 does not soft-cap"),
    "layer type": (
        tiny_config(Gemma2Config, **GEMMA, layer_types=["sliding_attention",
                                                        "chunked_attention"]),
        r"Unsupported layer_types \['chunked_attention'\]"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_unsupported_config_is_named(case: str) -> None:
    config, message = CASES[case]
    with pytest.raises(ValueError, match=message):
        _build(config)


def test_longrope_is_served_within_its_original_context(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path, dense_family_configs()["phi3"])
    with pytest.raises(ValueError, match=rf"max_model_len=100 is larger than the model's "
                                         rf"context length \({LONGROPE_CONTEXT}\) as served: its "
                                         rf"longrope RoPE scaling"):
        LLM(str(path), dtype="float32", device="cpu", max_model_len=100)
