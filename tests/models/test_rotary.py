"""RoPE settings and scaled frequencies agree with transformers' definitions."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from pagoda.models.layers.rotary import (
    get_rotary_embedding,
    inverse_frequencies,
    max_rope_position,
    rope_parameters,
)
from pagoda.ops import reference

HEAD = 16
SCALINGS = {
    "linear": {"factor": 2.0},
    "dynamic": {"factor": 3.0},
    "llama3": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 32,
    },
    "yarn": {"factor": 4.0, "original_max_position_embeddings": 64},
    "yarn-mscale": {
        "factor": 4.0,
        "original_max_position_embeddings": 64,
        "mscale": 0.7,
        "mscale_all_dim": 1.0,
    },
    "longrope": {
        "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.0, 4.0],
        "long_factor": [2.0, 3.0, 5.0, 8.0, 12.0, 20.0, 30.0, 40.0],
        "original_max_position_embeddings": 64,
    },
    "longrope-attention-factor": {
        "short_factor": [1.0] * 8, "long_factor": [4.0] * 8,
        "original_max_position_embeddings": 64, "attention_factor": 1.3,
    },
    "yarn-attention-factor": {
        "factor": 4.0,
        "original_max_position_embeddings": 64,
        "attention_factor": 1.5,
        "beta_fast": 16,
        "beta_slow": 2,
    },
}


def _config(rope_type: str, scaling: dict) -> LlamaConfig:
    return LlamaConfig(
        hidden_size=64,
        num_attention_heads=4,
        max_position_embeddings=256,
        rope_parameters={"rope_type": rope_type, "rope_theta": 5000.0, **scaling},
    )


@pytest.mark.parametrize("case", list(SCALINGS))
def test_frequencies_match_transformers(case):
    rope_type = case.split("-")[0]
    config = _config(rope_type, SCALINGS[case])
    params = rope_parameters(config)
    inv_freq, factor = inverse_frequencies(params, HEAD, config.max_position_embeddings)
    # Dynamic NTK is static here: the frequencies HF uses at the longest scaled length.
    seq_len = max_rope_position(params, 256) if rope_type == "dynamic" else None
    hf_inv_freq, hf_factor = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len=seq_len)
    torch.testing.assert_close(inv_freq, hf_inv_freq.float(), atol=0, rtol=1e-6)
    assert factor == pytest.approx(hf_factor)


def test_default_and_old_style_config():
    old = SimpleNamespace(
        rope_theta=500.0, rope_scaling={"type": "linear", "factor": 4.0}, max_position_embeddings=64
    )
    params = rope_parameters(old)
    assert params["rope_type"] == "linear" and params["rope_theta"] == 500.0
    assert max_rope_position(params, 64) == 256
    inv_freq, factor = inverse_frequencies(params, HEAD, 64)
    base = 1.0 / 500.0 ** (torch.arange(0, HEAD, 2).float() / HEAD)
    torch.testing.assert_close(inv_freq, base / 4.0)
    assert factor == 1.0
    plain = rope_parameters(SimpleNamespace(max_position_embeddings=64))
    assert (plain["rope_type"], plain["rope_theta"]) == ("default", 10000.0)


def test_unsupported_rope_type_is_named():
    config = SimpleNamespace(rope_parameters={"rope_type": "mrope"}, max_position_embeddings=64)
    with pytest.raises(ValueError, match=r"rope_parameters\.rope_type 'mrope'.*supported: "
                                         r"default, linear"):
        rope_parameters(config)


def test_rotary_layer_rotates_like_neox_reference():
    config = _config("yarn", SCALINGS["yarn"])
    rotary = get_rotary_embedding(config, HEAD)
    assert rotary.cos_sin_cache.shape == (256, HEAD)
    assert rotary.cos_sin_cache.dtype == torch.float32
    positions = torch.tensor([0, 5, 255])
    q, k = torch.randn(3, 4, HEAD), torch.randn(3, 2, HEAD)
    rq, rk = rotary(positions, q, k)
    eq, ek = reference.rotary_embedding(positions, q, k, rotary.cos_sin_cache, True)
    torch.testing.assert_close((rq, rk), (eq, ek))
    torch.testing.assert_close(rq[0], q[0] * rotary.cos_sin_cache[0, 0])  # position 0: scale only
