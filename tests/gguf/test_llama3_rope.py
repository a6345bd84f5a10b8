"""Llama 3.1 GGUF files: `rope_freqs.weight` (llama.cpp's per-frequency RoPE factors)
becomes HF llama3 scaling with the parameters the factors were made from (the logits:
tests/models/test_gguf_llama3_rope.py)."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import RopeScalingType

from pagoda.gguf import GGUFModel
from pagoda.gguf.rope import llama3_factors, rope_scaling_from_factors

LLAMA31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
           "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
# For the tiny file (theta 1e6, head 16): two frequencies fall in the blend.
TINY_LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 32.0, "original_max_position_embeddings": 4096}
THETA = 1e6  # the tiny file's rope.freq_base


def converter_factors(params: dict, theta: float, dim: int) -> np.ndarray:
    """The factors llama.cpp's converter writes, computed from wavelengths as it does."""
    factor, low, high = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
    context = params["original_max_position_embeddings"]
    out = []
    for freq in theta ** (-np.arange(0, dim, 2, dtype=np.float64) / dim):
        wavelen = 2 * np.pi / freq
        if wavelen < context / high:
            out.append(1.0)
        elif wavelen > context / low:
            out.append(factor)
        else:
            smooth = (context / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def test_llama31_factors_give_back_its_parameters():
    params = rope_scaling_from_factors(converter_factors(LLAMA31, 500000.0, 128), 500000.0, 128)
    assert params["original_max_position_embeddings"] == 8192
    for key in ("factor", "low_freq_factor", "high_freq_factor"):
        assert params[key] == pytest.approx(LLAMA31[key], rel=1e-5), key


@pytest.mark.parametrize("params", [LLAMA31, TINY_LLAMA3], ids=["llama3.1", "tiny"])
def test_parameters_reproduce_the_factors(params):
    dim, theta = (128, 500000.0) if params is LLAMA31 else (16, THETA)
    factors = converter_factors(params, theta, dim)
    np.testing.assert_allclose(llama3_factors(params, theta, dim), factors, rtol=1e-6)
    fitted = rope_scaling_from_factors(factors, theta, dim)
    np.testing.assert_allclose(llama3_factors(fitted, theta, dim), factors, rtol=1e-6)


def test_plain_and_uniform_factors():
    assert rope_scaling_from_factors(np.ones(8), THETA, 16) == {}
    assert rope_scaling_from_factors(np.full(8, 4.0), THETA, 16) == {"rope_type": "linear",
                                                                      "factor": 4.0}


@pytest.mark.parametrize(("factors", "message"), [
    (np.array([1, 1, 3, 1, 8, 8, 8, 8], dtype=np.float32), "no llama3 scaling gives"),
    (np.array([1, 1, 1, 0.5, 8, 8, 8, 8], dtype=np.float32), "below 1"),
    (np.ones(6, dtype=np.float32), "has 6 factors; the rotary dimension 16 needs 8"),
])
def test_factors_no_llama3_scaling_gives_are_refused(write_gguf, tiny_tensors, factors, message):
    path = write_gguf("llama", tiny_tensors("llama") | {"rope_freqs.weight": factors})
    with pytest.raises(ValueError, match=f"'rope_freqs.weight'.*{message}"):
        GGUFModel(path)


def test_rope_freqs_beside_a_scaling_type_is_refused(write_gguf, tiny_tensors):
    tensors = tiny_tensors("llama") | {"rope_freqs.weight": np.full(8, 2.0, dtype=np.float32)}
    path = write_gguf("llama", tensors, rope_scaling_type=RopeScalingType.LINEAR,
                      rope_scaling_factor=2.0)
    with pytest.raises(ValueError, match="rope_freqs.weight.*rope.scaling.type 'linear'"):
        GGUFModel(path)


def test_a_file_with_rope_freqs_has_llama3_scaling(write_gguf, tiny_tensors):
    factors = converter_factors(TINY_LLAMA3, THETA, 16)
    model = GGUFModel(write_gguf("llama", tiny_tensors("llama") | {"rope_freqs.weight": factors}))
    params = model.config.rope_parameters
    assert params["rope_type"] == "llama3" and params["rope_theta"] == THETA
    assert params["original_max_position_embeddings"] == 4096
    for key in ("factor", "low_freq_factor", "high_freq_factor"):
        assert params[key] == pytest.approx(TINY_LLAMA3[key], rel=1e-5), key
    assert "rope_freqs.weight" not in dict(model.iter_weights())  # the config holds it
