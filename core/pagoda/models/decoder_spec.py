"""What a decoder-only transformer is built from, read from an HF config.

Every dense family (Llama, Mistral, Qwen2/3, Gemma 2/3, Phi-3) is one decoder skeleton
(`pagoda.models.decoder`); a family says how its config maps onto a `DecoderSpec`. A
setting a family's config asks for that the skeleton does not implement is a ValueError
naming the config field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pagoda.models.layers.mlp import GATE_ACTIVATIONS

if TYPE_CHECKING:
    from transformers import PretrainedConfig


@dataclass(frozen=True)
class DecoderSpec:
    """The facts the decoder skeleton is built from, and each family's variations."""

    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_size: int
    rms_norm_eps: float
    tie_word_embeddings: bool
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    """Per-head RMSNorm of queries and keys before rotary (Qwen3, Gemma 3)."""
    activation: str = "silu"
    """The MLP's gate activation, by HF name (see `GATE_ACTIVATIONS`)."""
    norm_offset: bool = False
    """Norms scale by 1 + weight (Gemma)."""
    sandwich_norms: bool = False
    """Norms on the attention and MLP outputs too, before they join the residual stream
    (Gemma 2/3: post_attention_layernorm, pre/post_feedforward_layernorm)."""
    embedding_scale: bool = False
    """Embeddings times sqrt(hidden_size), rounded to the model dtype (Gemma)."""
    attention_scale: float | None = None
    """Query-key scale (None: head_size ** -0.5)."""
    attn_soft_cap: float | None = None
    """Attention scores capped to cap * tanh(s / cap) (Gemma 2)."""
    final_soft_cap: float | None = None
    """Logits capped likewise (Gemma 2/3)."""
    fused_checkpoint: bool = False
    """The checkpoint stores qkv_proj and gate_up_proj fused (Phi-3)."""


def attention_heads(config: PretrainedConfig) -> tuple[int, int, int]:
    """(num_heads, num_kv_heads, head_size)."""
    num_heads = config.num_attention_heads
    num_kv_heads = getattr(config, "num_key_value_heads", None) or num_heads
    head_size = getattr(config, "head_dim", None) or config.hidden_size // num_heads
    return num_heads, num_kv_heads, head_size


def base_spec(config: PretrainedConfig, *, activation_field: str = "hidden_act",
              **family: Any) -> DecoderSpec:
    """The spec of the config's common fields, with a family's own settings (`family`);
    the gate activation is read from `activation_field`."""
    num_heads, num_kv_heads, head_size = attention_heads(config)
    return DecoderSpec(
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_size=head_size,
        rms_norm_eps=config.rms_norm_eps,
        tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
        activation=gate_activation(config, activation_field),
        **family,
    )


def gate_activation(config: PretrainedConfig, field: str) -> str:
    """The config's MLP activation (HF name in `field`), checked to be implemented."""
    name = getattr(config, field, None) or "silu"
    if name not in GATE_ACTIVATIONS:
        raise ValueError(f"Unsupported {field} {name!r} (supported: "
                         f"{', '.join(GATE_ACTIVATIONS)})")
    return name


def refuse(config: PretrainedConfig, field: str, why: str) -> None:
    """A ValueError naming config field `field` when it is set (truthy)."""
    value = getattr(config, field, None)
    if value:
        raise ValueError(f"Unsupported {field}={value!r}: {why}")


def layer_sliding_windows(config: PretrainedConfig) -> list[int | None]:
    """Each layer's sliding window (None: full attention).

    HF `layer_types` marks sliding layers (Qwen2/3, Gemma 2/3); without it a set
    `sliding_window` applies to every layer (Mistral, Phi-3) unless `use_sliding_window`
    is false.
    """
    window = getattr(config, "sliding_window", None)
    num_layers = config.num_hidden_layers
    layer_types = getattr(config, "layer_types", None)
    unknown = sorted(set(layer_types or ()) - {"sliding_attention", "full_attention"})
    if unknown:
        raise ValueError(f"Unsupported layer_types {unknown} (supported: sliding_attention, "
                         "full_attention)")
    if window is None or getattr(config, "use_sliding_window", True) is False:
        return [None] * num_layers
    if layer_types is None:
        return [window] * num_layers
    return [window if kind == "sliding_attention" else None for kind in layer_types]


def attention_shape(config: PretrainedConfig) -> tuple[int, int, int, int | None]:
    """(num_heads, num_kv_heads, head_size, sliding_window) for choosing a backend.

    sliding_window is set when any layer uses one.
    """
    windows = [w for w in layer_sliding_windows(config) if w is not None]
    return (*attention_heads(config), max(windows) if windows else None)


def attention_soft_cap(config: PretrainedConfig) -> float | None:
    """The attention logit soft cap the backend must apply (HF `attn_logit_softcapping`)."""
    return getattr(config, "attn_logit_softcapping", None)
