"""A decoder layer's decode step fused by the platform: two calls around its attention.

In a step of one token a sequence a layer's own work is small (on a CPU, SmolLM2's layers
are ~0.1 ms each), and running it op by op from Python costs about as much again in module
calls, views and dispatch. A platform may take the layer's parts, as the `DecodeLayerSpec`
below names them, and return a `FusedDecodeLayer`: everything before the attention in one
call and everything after it in another. The attention itself still runs through the
layer's attention backend, and the platform fuses only the ops the layer would have run
(the spec hands over the resolved op callables, so it can check they are its own): the
results are the unfused layer's. `Platform.fuse_decode_layer` decides; layers it declines,
and steps that are not decode-only or are longer than `max_rows`, run op by op.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import nn

if TYPE_CHECKING:
    from pagoda.platforms.platform import Platform


@dataclass(frozen=True)
class FusableLinear:
    """A linear layer as one op call: y = op(x, weight, bias)."""

    op: Callable[..., torch.Tensor]
    weight: Any
    bias: torch.Tensor | None


@dataclass(frozen=True)
class DecodeLayerSpec:
    """A pre-norm decoder layer without extras (no per-head or sandwich norms, no LoRA, one
    tensor-parallel rank): input norm, qkv projection, rotary embedding, attention, output
    projection, the residual add with the post-attention norm, then a gated MLP."""

    input_norm: torch.Tensor
    post_attention_norm: torch.Tensor
    eps: float
    rms_norm: Callable[..., torch.Tensor]
    fused_add_rms_norm: Callable[..., torch.Tensor]
    qkv: FusableLinear
    o: FusableLinear
    gate_up: FusableLinear
    down: FusableLinear
    act_and_mul: Callable[[torch.Tensor], torch.Tensor]
    """The MLP's gated activation op (silu_and_mul for SiLU)."""
    rotary_embedding: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    cos_sin_cache: torch.Tensor
    is_neox: bool
    num_heads: int
    num_kv_heads: int
    head_size: int


class FusedDecodeLayer(Protocol):
    max_rows: int
    """The most tokens (sequences) a step may have to take this path."""

    def pre_attention(self, positions: torch.Tensor, hidden_states: torch.Tensor,
                      residual: torch.Tensor | None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(query [T, H, D] and key [T, K, D] rotated, value [T, K, D], the residual
        stream): the input norm (added to `residual` first unless it is None, the first
        layer), the qkv projection and the rotary embedding."""

    def post_attention(self, attn_out: torch.Tensor, residual: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        """(the layer's output, the residual stream before it is added) from the
        attention's output [T, H * D]: output projection, add and norm, gated MLP."""


def _linear(layer: nn.Module) -> FusableLinear | None:
    call = layer.quant_method.kernel_call(layer)
    if call is None or layer.lora is not None or layer.tp.world_size != 1:
        return None
    return FusableLinear(call[0], call[1], layer.bias)


def decode_layer_spec(layer: nn.Module) -> DecodeLayerSpec | None:
    """The parts of a `DecoderLayer` with a gated MLP, or None where it has extras the
    spec does not describe."""
    from pagoda.models.decoder import DecoderLayer
    from pagoda.models.layers import GatedMLP

    if not isinstance(layer, DecoderLayer) or not isinstance(layer.mlp, GatedMLP):
        return None
    attn, mlp = layer.self_attn, layer.mlp
    if (attn.q_norm is not None or layer.pre_feedforward_layernorm is not None
            or layer.post_feedforward_layernorm is not None):
        return None
    linears = [_linear(m) for m in (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj,
                                    mlp.down_proj)]
    norm, post = layer.input_layernorm, layer.post_attention_layernorm
    if any(linear is None for linear in linears) or norm.eps != post.eps:
        return None
    qkv, o, gate_up, down = linears
    assert qkv and o and gate_up and down
    rotary = attn.rotary_emb
    return DecodeLayerSpec(
        norm.weight, post.weight, norm.eps, norm.rms_norm_op, norm.fused_add_rms_norm_op, qkv, o,
        gate_up, down, mlp.act_and_mul_op, rotary.rotary_embedding_op, rotary.cos_sin_cache,
        rotary.is_neox, attn.num_heads, attn.num_kv_heads, attn.head_size)


def fuse_decode_layers(model: nn.Module, platform: Platform) -> int:
    """Give each decoder layer of `model` the platform's fused decode step where it offers
    one (after the weights are processed and LoRA slots attached); how many it fused."""
    fused = 0
    for module in model.modules():
        spec = decode_layer_spec(module)
        if spec is not None:
            module.fused_decode = platform.fuse_decode_layer(spec)
            fused += module.fused_decode is not None
    return fused
