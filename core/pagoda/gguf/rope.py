"""A GGUF file's `rope_freqs.weight` as HF llama3 RoPE scaling.

llama.cpp's converter writes Llama 3.1-style scaling as one factor per rotary frequency
(the frequency is divided by it) and no metadata: the low frequencies are divided by
`factor`, the high ones kept, those between blended linearly in the frequency. Only two
numbers of HF's (original_max_position_embeddings, low_freq_factor, high_freq_factor)
shape that blend, the frequencies where it starts and ends; they are recovered from the
factors, the parameters chosen to give exactly those, and the factors they reproduce are
checked against the file's.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

TENSOR = "rope_freqs.weight"
_BLEND_TOLERANCE = 1e-6
_MATCH_RTOL = 1e-4


def llama3_factors(params: dict[str, Any], theta: float, dim: int) -> np.ndarray:
    """The per-frequency divisors HF's llama3 scaling applies (llama.cpp's rope_freqs)."""
    freqs = _frequencies(theta, dim)
    context, factor = params["original_max_position_embeddings"], params["factor"]
    low, high = params["low_freq_factor"], params["high_freq_factor"]
    blend = np.clip((context * freqs / (2 * math.pi) - low) / (high - low), 0.0, 1.0)
    return 1.0 / ((1 - blend) / factor + blend)


def rope_scaling_from_factors(factors: np.ndarray, theta: float, dim: int) -> dict[str, Any]:
    """HF rope parameters (beside rope_theta) that divide the frequencies of a `dim`-wide
    rotation with base `theta` by `factors`: llama3 scaling, linear when every frequency
    is divided alike, none when all factors are 1. A ValueError when no llama3 scaling
    gives them."""
    factors = np.asarray(factors, dtype=np.float64).reshape(-1)
    if factors.shape != (dim // 2,):
        raise ValueError(f"GGUF tensor {TENSOR!r} has {factors.size} factors; the rotary "
                         f"dimension {dim} needs {dim // 2}")
    factor = float(factors.max())
    if np.allclose(factors, 1.0, rtol=0, atol=_MATCH_RTOL):
        return {}
    if np.allclose(factors, factor, rtol=_MATCH_RTOL, atol=0):
        return {"rope_type": "linear", "factor": factor}
    if factors.min() < 1 - _MATCH_RTOL:
        raise ValueError(f"GGUF tensor {TENSOR!r} holds RoPE factors below 1 (frequencies "
                         f"raised), which no llama3 scaling gives: {factors.tolist()}")
    freqs = _frequencies(theta, dim)
    # 0 where a frequency is divided by `factor`, 1 where kept, between in the blend.
    blend = (1 / factors - 1 / factor) / (1 - 1 / factor)
    start, end = _blend_ends(freqs, blend)
    context = max(1, round(2 * math.pi / start))
    params = {
        "rope_type": "llama3",
        "factor": factor,
        "low_freq_factor": context * start / (2 * math.pi),
        "high_freq_factor": context * end / (2 * math.pi),
        "original_max_position_embeddings": context,
    }
    if not np.allclose(llama3_factors(params, theta, dim), factors, rtol=_MATCH_RTOL, atol=0):
        raise ValueError(f"GGUF tensor {TENSOR!r} holds RoPE factors that no llama3 scaling "
                         f"gives: {factors.tolist()}")
    return params


def _frequencies(theta: float, dim: int) -> np.ndarray:
    return theta ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)


def _blend_ends(freqs: np.ndarray, blend: np.ndarray) -> tuple[float, float]:
    """(frequency where the blend leaves 0, where it reaches 1): fitted through the blended
    frequencies where there are two or more, else as close to the divided ones as the
    kept ones allow."""
    scaled = blend <= _BLEND_TOLERANCE
    kept = blend >= 1 - _BLEND_TOLERANCE
    between = ~(scaled | kept)
    start = float(freqs[scaled].max())
    if between.sum() >= 2:  # freq = start + blend * (end - start)
        slope, start = np.polyfit(blend[between], freqs[between], 1)
        return float(start), float(start + slope)
    if between.any():
        (f,), (b,) = freqs[between], blend[between]
        return start, float(start + (f - start) / b)
    return start, float(freqs[kept].min()) if kept.any() else 2 * float(freqs.max())
