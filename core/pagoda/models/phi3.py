"""Phi-3 on the shared decoder: a Llama-like model whose checkpoint stores the query/key/
value and gate/up projections fused (`qkv_proj`, `gate_up_proj`), with partial rotary and
LongRoPE (`rope_type` longrope, see `pagoda.models.layers.rotary`) where configured."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pagoda.models.decoder import DecoderForCausalLM
from pagoda.models.decoder_spec import DecoderSpec, base_spec

if TYPE_CHECKING:
    from transformers import PretrainedConfig


def phi3_spec(config: PretrainedConfig) -> DecoderSpec:
    return base_spec(config, fused_checkpoint=True)


class Phi3ForCausalLM(DecoderForCausalLM):
    decoder_spec = staticmethod(phi3_spec)
