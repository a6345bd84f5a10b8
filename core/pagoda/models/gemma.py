"""Gemma 2 and Gemma 3 (text) on the shared decoder.

Both: GELU (tanh) gated MLP, norms that scale by 1 + weight, sandwich norms around
attention and MLP, embeddings scaled by sqrt(hidden_size), `query_pre_attn_scalar` for the
attention scale, alternating sliding-window and global layers (`layer_types`), final logit
soft-capping, tied embeddings. Gemma 2 also soft-caps attention scores; Gemma 3 adds q/k
norms and its own RoPE settings for sliding layers (`rope_parameters` per layer type).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pagoda.models.decoder import DecoderForCausalLM
from pagoda.models.decoder_spec import DecoderSpec, base_spec, refuse

if TYPE_CHECKING:
    from transformers import PretrainedConfig


def _gemma_spec(config: PretrainedConfig, **family: object) -> DecoderSpec:
    refuse(config, "use_bidirectional_attention", "only causal attention is implemented")
    bias = bool(getattr(config, "attention_bias", False))
    return base_spec(
        config, activation_field="hidden_activation", qkv_bias=bias, o_bias=bias,
        norm_offset=True, sandwich_norms=True, embedding_scale=True,
        attention_scale=config.query_pre_attn_scalar**-0.5,
        final_soft_cap=getattr(config, "final_logit_softcapping", None), **family,
    )


def gemma2_spec(config: PretrainedConfig) -> DecoderSpec:
    return _gemma_spec(config, attn_soft_cap=getattr(config, "attn_logit_softcapping", None))


def gemma3_spec(config: PretrainedConfig) -> DecoderSpec:
    refuse(config, "attn_logit_softcapping",
           "Gemma 3 does not soft-cap attention scores (HF transformers ignores the field)")
    return _gemma_spec(config, qk_norm=True)


class Gemma2ForCausalLM(DecoderForCausalLM):
    decoder_spec = staticmethod(gemma2_spec)


class Gemma3ForCausalLM(DecoderForCausalLM):
    decoder_spec = staticmethod(gemma3_spec)
