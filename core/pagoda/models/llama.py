"""The Llama family on the shared decoder: Llama, Mistral, Qwen2 and Qwen3.

Their differences are config: qkv bias (Qwen2), per-head q/k RMSNorm before rotary (Qwen3),
head_dim != hidden / heads, sliding-window layers (Mistral, Qwen2/3), tied embeddings,
attention_bias / mlp_bias.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pagoda.models.decoder import DecoderForCausalLM
from pagoda.models.decoder_spec import DecoderSpec, base_spec

if TYPE_CHECKING:
    from transformers import PretrainedConfig

# What HF hard-codes per family instead of writing it in config.json.
_QKV_BIAS_BY_DEFAULT = ("qwen2", "qwen2_moe")
_QK_NORM = ("qwen3", "qwen3_moe")


def llama_spec(config: PretrainedConfig) -> DecoderSpec:
    model_type = getattr(config, "model_type", "")
    attention_bias = getattr(config, "attention_bias", None)
    qkv_bias = getattr(config, "qkv_bias", None)  # Qwen2-MoE's own name for it
    return base_spec(
        config,
        qkv_bias=bool(qkv_bias) if qkv_bias is not None else (
            bool(attention_bias)
            or (attention_bias is None and model_type in _QKV_BIAS_BY_DEFAULT)),
        o_bias=bool(attention_bias),
        mlp_bias=bool(getattr(config, "mlp_bias", False)),
        qk_norm=model_type in _QK_NORM,
    )


class LlamaForCausalLM(DecoderForCausalLM):
    decoder_spec = staticmethod(llama_spec)
