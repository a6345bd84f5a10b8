"""The transformers fallback: causal LMs Pagoda has no class for, run with HF
transformers' modeling code over Pagoda's paged KV cache, scheduler and sampler."""

from pagoda.models.hf_fallback.model import TransformersForCausalLM
from pagoda.models.hf_fallback.support import (
    FallbackUnsupported,
    config_architectures,
    fallback_class,
    transformers_causal_lm,
)

__all__ = [
    "FallbackUnsupported",
    "TransformersForCausalLM",
    "config_architectures",
    "fallback_class",
    "transformers_causal_lm",
]
