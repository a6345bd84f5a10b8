"""Rotary position embedding: RoPE settings from an HF config, scaled frequencies, the layer.

Supported `rope_type`s: default, linear, dynamic (NTK, static: frequencies for the longest
scaled length, since a paged cache cannot re-rotate cached keys), llama3, yarn, longrope
(the short factors: the engine serves such a model within its original context, see
`longrope_context_limit`). Settings may differ by layer type (Gemma 3: `rope_parameters`
keyed by "sliding_attention" / "full_attention").
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from pagoda.ops import current_ops

_COMMON_KEYS = {"rope_type", "rope_theta", "partial_rotary_factor",
                "original_max_position_embeddings"}
ROPE_KEYS: dict[str, set[str]] = {
    "default": set(),
    "linear": {"factor"},
    "dynamic": {"factor"},
    "llama3": {"factor", "low_freq_factor", "high_freq_factor"},
    "yarn": {"factor", "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
             "truncate"},
    "longrope": {"short_factor", "long_factor", "factor", "attention_factor"},
}
"""The keys each supported `rope_type` reads, besides the common ones."""
ROPE_TYPES = tuple(ROPE_KEYS)
_ALIASES = {"su": "longrope"}  # Phi-3's older name


def _rope_field(config: Any) -> tuple[str, dict[str, Any]]:
    """(the config field holding RoPE settings, its dict)."""
    field = "rope_parameters" if getattr(config, "rope_parameters", None) else "rope_scaling"
    return field, dict(getattr(config, field, None) or {})


def rope_by_layer_type(config: Any) -> bool:
    """Whether the config's RoPE settings are given per layer type."""
    return any(isinstance(v, dict) for v in _rope_field(config)[1].values())


def _raw_rope_settings(config: Any, layer_type: str | None) -> tuple[dict[str, Any], str]:
    """The config's RoPE dict for `layer_type` and how messages name it."""
    field, raw = _rope_field(config)
    nested = {k: v for k, v in raw.items() if isinstance(v, dict)}
    if not nested:
        return raw, field
    if layer_type not in nested:
        raise ValueError(f"The config's {field} is set per layer type ({', '.join(nested)}), "
                         f"but no settings are given for layer type {layer_type!r}")
    return dict(nested[layer_type]), f"{field}[{layer_type!r}]"


def rope_parameters(config: Any, layer_type: str | None = None) -> dict[str, Any]:
    """The config's RoPE settings (for layers of `layer_type` where they differ by type) as
    one dict with `rope_type`, `rope_theta` and any scaling.

    Reads transformers-5 `config.rope_parameters`, or the older `rope_theta` + `rope_scaling`.
    A rope type or a setting this module does not implement is a ValueError naming it.
    """
    params, field = _raw_rope_settings(config, layer_type)
    rope_type = params.pop("rope_type", None) or params.pop("type", None) or "default"
    params.pop("type", None)
    params["rope_type"] = rope_type = _ALIASES.get(rope_type, rope_type)
    if rope_type not in ROPE_KEYS:
        raise ValueError(f"Unsupported {field}.rope_type {rope_type!r} "
                         f"(supported: {', '.join(ROPE_TYPES)})")
    unknown = sorted(set(params) - _COMMON_KEYS - ROPE_KEYS[rope_type])
    if unknown:
        raise ValueError(f"Unsupported {field} settings for rope_type {rope_type!r}: "
                         f"{', '.join(unknown)}")
    if params.get("rope_theta") is None:
        params["rope_theta"] = getattr(config, "rope_theta", None) or 10000.0
    if params.get("partial_rotary_factor") is None:
        params["partial_rotary_factor"] = getattr(config, "partial_rotary_factor", None) or 1.0
    if params.get("original_max_position_embeddings") is None:
        params["original_max_position_embeddings"] = (
            getattr(config, "original_max_position_embeddings", None)
            or config.max_position_embeddings
        )
    return params


def _base_inv_freq(base: float, rot_dim: int) -> torch.Tensor:
    exponents = torch.arange(0, rot_dim, 2, dtype=torch.float32) / rot_dim
    return 1.0 / (base**exponents)


def _llama3_inv_freq(inv_freq: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
    """Divide low frequencies by `factor`, keep high ones, blend smoothly in between."""
    factor, low, high = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
    context = params["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    smooth = ((context / wavelen - low) / (high - low)).clamp(0.0, 1.0)
    return (1 - smooth) * inv_freq / factor + smooth * inv_freq


def _yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _yarn_inv_freq(
    params: dict[str, Any], rot_dim: int, max_position: int
) -> tuple[torch.Tensor, float]:
    """Interpolate slow-rotating dims by `factor`, keep fast ones, ramp linearly in between."""
    context = params["original_max_position_embeddings"]
    base, factor = params["rope_theta"], params.get("factor") or max_position / context
    beta_fast, beta_slow = params.get("beta_fast") or 32, params.get("beta_slow") or 1

    def dim_for(rotations: float) -> float:
        return rot_dim * math.log(context / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = dim_for(beta_fast), dim_for(beta_slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rot_dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(rot_dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    inv_freq = _base_inv_freq(base, rot_dim)
    inv_freq = inv_freq / factor * ramp + inv_freq * (1 - ramp)

    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
        if mscale and mscale_all_dim:
            attention_factor = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim)
        else:
            attention_factor = _yarn_mscale(factor)
    return inv_freq, float(attention_factor)


def _longrope_inv_freq(
    params: dict[str, Any], rot_dim: int, max_position: int
) -> tuple[torch.Tensor, float]:
    """The base frequencies divided by the per-dimension short factors; cos and sin scaled
    as LongRoPE scales attention for the longer context the model was extended to."""
    for key in ("short_factor", "long_factor"):
        if len(params[key]) != rot_dim // 2:
            raise ValueError(f"rope_parameters.{key} has {len(params[key])} entries, the "
                             f"rotary dimension {rot_dim} needs {rot_dim // 2}")
    inv_freq = _base_inv_freq(params["rope_theta"], rot_dim)
    inv_freq = inv_freq / torch.tensor(params["short_factor"], dtype=torch.float32)
    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        context = params["original_max_position_embeddings"]
        factor = params.get("factor") or max_position / context
        attention_factor = (1.0 if factor <= 1.0
                            else math.sqrt(1 + math.log(factor) / math.log(context)))
    return inv_freq, float(attention_factor)


def longrope_context_limit(config: Any) -> int | None:
    """The longest sequence a longrope config is served for, or None (no limit of its own).

    LongRoPE rotates every position with the short factors while the whole sequence fits
    in `original_max_position_embeddings` and with the long ones beyond it; a paged cache
    cannot re-rotate the keys it holds when a sequence crosses over, so only the short
    factors are implemented, and sequences stay within the original context (no limit
    when the two factor lists are equal).
    """
    by_type = rope_by_layer_type(config)
    layer_types = set(getattr(config, "layer_types", None) or [None]) if by_type else {None}
    limits = []
    for layer_type in layer_types:
        params = rope_parameters(config, layer_type)
        if params["rope_type"] == "longrope" and params["short_factor"] != params["long_factor"]:
            limits.append(int(params["original_max_position_embeddings"]))
    return min(limits) if limits else None


def inverse_frequencies(
    params: dict[str, Any], rot_dim: int, max_position: int
) -> tuple[torch.Tensor, float]:
    """(inverse frequencies [rot_dim // 2] float32, factor applied to cos and sin).

    `max_position` is the config's `max_position_embeddings`.
    """
    rope_type, base = params["rope_type"], params["rope_theta"]
    if rope_type == "yarn":
        return _yarn_inv_freq(params, rot_dim, max_position)
    if rope_type == "longrope":
        return _longrope_inv_freq(params, rot_dim, max_position)
    if rope_type == "dynamic":
        factor = params["factor"]
        base = base * (factor * factor - (factor - 1)) ** (rot_dim / (rot_dim - 2))
    inv_freq = _base_inv_freq(base, rot_dim)
    if rope_type == "linear":
        inv_freq = inv_freq / params["factor"]
    elif rope_type == "llama3":
        inv_freq = _llama3_inv_freq(inv_freq, params)
    return inv_freq, 1.0


def max_rope_position(params: dict[str, Any], max_position: int) -> int:
    """Positions the cos/sin table covers: the config's, or the scaled original length."""
    scaled = params["original_max_position_embeddings"] * (params.get("factor") or 1.0)
    return max(max_position, int(scaled))


class RotaryEmbedding(nn.Module):
    """Rotates the first `rot_dim` dims of each query/key head by its token's position."""

    def __init__(
        self,
        head_size: int,
        rot_dim: int,
        inv_freq: torch.Tensor,
        max_position: int,
        *,
        attention_factor: float = 1.0,
        is_neox: bool = True,
    ):
        super().__init__()
        self.head_size = head_size
        self.rot_dim = rot_dim
        self.is_neox = is_neox
        angles = torch.outer(torch.arange(max_position, dtype=torch.float32), inv_freq.float())
        cos_sin = torch.cat((angles.cos(), angles.sin()), dim=-1) * attention_factor
        self.register_buffer("cos_sin_cache", cos_sin, persistent=False)  # [max_pos, rot_dim]
        self.rotary_embedding_op = current_ops().rotary_embedding

    def forward(
        self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """query [T, H, D], key [T, K, D] -> rotated (query, key)."""
        return self.rotary_embedding_op(positions, query, key, self.cos_sin_cache, self.is_neox)


def get_rotary_embedding(config: Any, head_size: int, *, is_neox: bool = True,
                         layer_type: str | None = None) -> RotaryEmbedding:
    """The rotary embedding an HF config describes, for heads of `head_size` (in layers of
    `layer_type`, where the settings differ by type)."""
    params = rope_parameters(config, layer_type)
    rot_dim = int(head_size * params["partial_rotary_factor"])
    max_position = config.max_position_embeddings
    inv_freq, attention_factor = inverse_frequencies(params, rot_dim, max_position)
    return RotaryEmbedding(
        head_size,
        rot_dim,
        inv_freq,
        max_rope_position(params, max_position),
        attention_factor=attention_factor,
        is_neox=is_neox,
    )


def layer_rotary_embeddings(config: Any, head_size: int) -> list[RotaryEmbedding]:
    """Each layer's rotary embedding: one shared by all, or one per layer type where the
    config's settings differ by type."""
    num_layers = config.num_hidden_layers
    layer_types = getattr(config, "layer_types", None) or [None] * num_layers
    if not rope_by_layer_type(config):
        return [get_rotary_embedding(config, head_size)] * num_layers
    by_type = {kind: get_rotary_embedding(config, head_size, layer_type=kind)
               for kind in dict.fromkeys(layer_types)}
    return [by_type[kind] for kind in layer_types]
